// kolorun --num-servers: the parameter servers it starts beside the ranks
// (kolo-server), their tagged output, the end of the job (servers stop with
// it; a killed server fails it, named), nothing of the job left behind, and
// its answers to bad server flags.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "harness/job_processes.h"
#include "harness/kolorun_process.h"
#include "harness/subprocess.h"
#include "harness/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kolo::testing::KolorunProcess;
using kolo::testing::RunResult;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The value of `name` in process `pid`'s environment, "" when absent or unreadable.
std::string environment_value(pid_t pid, const std::string& name) {
  const std::string env = read_file("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = name + "=";
  for (std::size_t at = 0; at < env.size();) {
    const std::size_t end = env.find('\0', at);
    const std::string entry = env.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.rfind(key, 0) == 0) return entry.substr(key.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

// kolo-server processes whose parent is `kolorun`, by server index.
std::map<int, pid_t> servers_of(pid_t kolorun) {
  std::map<int, pid_t> servers;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string stat = read_file(entry.path().string() + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || !contains(stat.substr(0, close), "(kolo-server")) continue;
    if (std::stoi(stat.substr(close + 4)) != kolorun) continue;
    const pid_t pid = std::stoi(name);
    const std::string index = environment_value(pid, "KOLO_SERVER_RANK");
    if (!index.empty()) servers[std::stoi(index)] = pid;
  }
  return servers;
}

class KolorunServersTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return temp_.file(name); }
  kolo::testing::TempDir temp_{"kolorun_servers_test"};
};

// The collective suite through two servers: it passes, the servers' lines are
// tagged as theirs, they stop with the job without failing it, and nothing of
// the job is left.
TEST_F(KolorunServersTest, AJobThroughServersSucceedsAndLeavesNothing) {
  ::setenv("KOLO_LOG_LEVEL", "debug", 1);  // the servers say when their workers are in
  const auto result = kolo::testing::run_kolorun_at(
      KOLORUN_PATH, {"-np", "2", "--num-servers", "2", "--verbose", KOLO_COLLECTIVE_SUITE_PATH}, 120s);
  ::unsetenv("KOLO_LOG_LEVEL");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_TRUE(contains(result.out, "[1]<stdout>:rank 1 of 2: passed")) << result.out;
  EXPECT_TRUE(contains(result.err, "allreduce through 2 parameter server(s)")) << result.err;
  EXPECT_TRUE(contains(result.err, "\n  server 1 on ")) << result.err;
  EXPECT_TRUE(contains(result.err, "[server 1]<stderr>:[kolo] debug: tcp: server 1 connected")) << result.err;
  const auto at = result.err.find("kolorun: job ");
  ASSERT_NE(at, std::string::npos) << result.err;
  const std::string job = result.err.substr(at + 13, 16);
  EXPECT_TRUE(kolo::testing::processes_of_job(job).empty()) << "processes of the job outlived kolorun";
}

TEST_F(KolorunServersTest, KilledServerFailsTheJobNamingIt) {
  KolorunProcess kolorun(KOLORUN_PATH, {"-np", "2", "--num-servers", "2", "--timeout", "60", KOLO_STUCK_PATH, "steady",
                                        path("running")});
  const auto deadline = Clock::now() + 30s;
  while ((!fs::exists(path("running.0")) || !fs::exists(path("running.1"))) && Clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  auto servers = servers_of(kolorun.pid());
  ASSERT_EQ(servers.size(), 2u);
  const std::string job = environment_value(servers[1], "KOLO_JOB_ID");
  ::kill(servers[1], SIGKILL);
  const RunResult result = kolorun.wait(30s);
  EXPECT_NE(result.exit_code, 0) << result.err;
  EXPECT_TRUE(contains(result.err, "kolorun: server 1 (pid " + std::to_string(servers[1]) + ") was killed by signal 9"))
      << result.err;
  // Every rank names the server in its error.
  EXPECT_TRUE(contains(result.err, "[0]<stderr>:rank 0: ")) << result.err;
  for (const std::string& rank : {"0", "1"}) {
    const auto at = result.err.find("[" + rank + "]<stderr>:rank " + rank + ": ");
    ASSERT_NE(at, std::string::npos) << result.err;
    EXPECT_TRUE(contains(result.err.substr(at, result.err.find('\n', at) - at), "server 1")) << result.err;
  }
  EXPECT_TRUE(kolo::testing::processes_of_job(job).empty()) << "processes of the job outlived kolorun";
}

}  // namespace
