// kolorun --bind-to: each local rank on its own share of kolorun's CPUs. kolorun
// runs under taskset so that the CPUs it may use are known to the test.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "harness/kolorun_process.h"

namespace {

using namespace std::chrono_literals;
using kolo::testing::lines_of;
using kolo::testing::RunResult;

// What each rank's kernel says it may run on, one "[rank]<stdout>:LIST" line each.
const char* kShowCpus = "grep Cpus_allowed_list /proc/self/status | cut -f2; echo bind=$KOLO_CPU_BIND";

class KolorunBinding : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/taskset", X_OK) != 0) GTEST_SKIP() << "taskset is not installed (Debian: util-linux)";
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
    if (!CPU_ISSET(0, &set) || !CPU_ISSET(1, &set)) GTEST_SKIP() << "needs CPUs 0 and 1";
  }

  // kolorun restricted to `cpus` (taskset's list form), then `args`.
  static RunResult run(const std::string& cpus, std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/bin/taskset", "-c", cpus, KOLORUN_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    return kolo::testing::run_command(argv, 20s);
  }

  static bool has_line(const RunResult& result, const std::string& line) {
    auto out = lines_of(result.out);
    return std::find(out.begin(), out.end(), line) != out.end();
  }

  static std::string line_of(const RunResult& result, const std::string& prefix) {
    for (const auto& line : lines_of(result.out))
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    return "<no line " + prefix + ">";
  }
};

TEST_F(KolorunBinding, EachLocalRankGetsItsOwnCpus) {
  auto result = run("0,1", {"-np", "2", "sh", "-c", kShowCpus});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result, "[0]<stdout>:0")) << result.out;
  EXPECT_TRUE(has_line(result, "[1]<stdout>:1")) << result.out;
  EXPECT_TRUE(has_line(result, "[1]<stdout>:bind=core")) << result.out;
}

TEST_F(KolorunBinding, OneRankKeepsEveryCpu) {
  auto result = run("0,1", {"-np", "1", "sh", "-c", kShowCpus});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(line_of(result, "[0]<stdout>:"), "0-1") << result.out;
}

TEST_F(KolorunBinding, RanksOutnumberingTheCpusAreNotStackedOnOne) {
  auto result = run("0,1", {"-np", "3", "sh", "-c", kShowCpus});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  for (int rank = 0; rank < 3; ++rank) {
    auto prefix = "[" + std::to_string(rank) + "]<stdout>:";
    EXPECT_EQ(line_of(result, prefix), "0-1") << result.out;
  }
}

TEST_F(KolorunBinding, BindToNoneLeavesRanksOnEveryCpu) {
  auto result = run("0,1", {"--bind-to", "none", "-np", "2", "sh", "-c", kShowCpus});
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(has_line(result, "[0]<stdout>:0-1")) << result.out;
  EXPECT_TRUE(has_line(result, "[1]<stdout>:0-1")) << result.out;
  EXPECT_TRUE(has_line(result, "[0]<stdout>:bind=none")) << result.out;
}

TEST_F(KolorunBinding, UnknownBindingIsRefusedWithOneLine) {
  auto result = run("0,1", {"--bind-to", "socket", "-np", "2", "true"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_EQ(lines_of(result.err).size(), 1u) << result.err;
  EXPECT_NE(result.err.find("--bind-to 'socket' is not a binding"), std::string::npos) << result.err;
}

}  // namespace
