// Elastic jobs across hosts made of network namespaces (tests/harness/netns.h):
// kolorun runs in host 0 and reaches the others through 'ip netns exec {host}'.
// A host's worker killed, and a host cut off (its link taken down), leave the
// others training; nothing is left running in any namespace afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/netns.h"
#include "harness/subprocess.h"
#include "harness/time_bound.h"

#ifndef KOLORUN_PATH
#error "tests/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

namespace {

using kolo::testing::NetnsHosts;
using kolo::testing::NetnsOptions;
using kolo::testing::Subprocess;
using kolo::testing::time_bound;
using namespace std::chrono_literals;

// worker id -> "size steps checksum" of its final line.
std::map<int, std::string> finished(const std::string& out) {
  std::map<int, std::string> result;
  const std::regex line(R"(worker (\d+) rank \d+ size (\d+) steps (\d+) checksum (\S+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it)
    result[std::stoi((*it)[1])] = std::string((*it)[2]) + " " + std::string((*it)[3]) + " " + std::string((*it)[4]);
  return result;
}

class KolorunElasticHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = NetnsHosts::unavailable()) GTEST_SKIP() << "no network namespaces here: " << *why;
    hosts_ = std::make_unique<NetnsHosts>(NetnsOptions{3});
  }

  void TearDown() override {
    if (!hosts_) return;
    for (int h = 0; h < hosts_->size(); ++h) {
      const auto deadline = std::chrono::steady_clock::now() + time_bound(3s);
      while (!hosts_->pids(h).empty() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
      EXPECT_TRUE(hosts_->pids(h).empty()) << "left running in " << hosts_->name(h);
    }
  }

  Subprocess::Result run(const std::vector<std::string>& args, const Subprocess::Environment& env = {}) {
    std::vector<std::string> argv = hosts_->exec_prefix(0);
    argv.insert(argv.end(), {KOLORUN_PATH, "--launcher-command", "ip netns exec {host}", "--network-interface",
                             NetnsHosts::kInterface, "-H",
                             hosts_->name(0) + ":1," + hosts_->name(1) + ":1," + hosts_->name(2) + ":1", "--min-np",
                             "2"});
    argv.insert(argv.end(), args.begin(), args.end());
    return kolo::testing::run_command(argv, time_bound(90s), env);
  }

  // Workers 0 and 1 (hosts 0 and 1) finished all `steps` alike, in a job of 2.
  static void expect_two_survivors(const Subprocess::Result& r, int steps) {
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
    const auto done = finished(r.out);
    ASSERT_EQ(done.size(), 2u) << r.out << r.err;
    ASSERT_TRUE(done.count(0) && done.count(1)) << r.out;
    EXPECT_EQ(done.at(0), done.at(1));
    EXPECT_EQ(done.at(0).rfind("2 " + std::to_string(steps) + " ", 0), 0u) << done.at(0);
  }

  std::unique_ptr<NetnsHosts> hosts_;
};

TEST_F(KolorunElasticHosts, AHostsWorkerKilledLeavesTheOtherHostsTraining) {
  const auto r = run({KOLO_ELASTIC_WORKER_PATH, "40", "kill", "2", "10"});
  expect_two_survivors(r, 40);
  EXPECT_NE(r.err.find("elastic: generation 1 has 2 worker(s)"), std::string::npos) << r.err;
}

// Host 2 is cut off mid-run: its peers time out on it (KOLO_PEER_TIMEOUT) and
// blame it, kolorun kills its worker through the launcher command, which still
// reaches the namespace, and the other two go on.
TEST_F(KolorunElasticHosts, AHostCutOffIsDroppedAfterThePeerTimeout) {
  const std::string progress = "/tmp/kolo-elastic-hosts-" + std::to_string(::getpid());
  std::thread cut([&] {
    const auto deadline = std::chrono::steady_clock::now() + time_bound(30s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(progress);
      int step = 0;
      if (in >> step && step >= 20) break;
      std::this_thread::sleep_for(20ms);
    }
    hosts_->set_link(2, false);
  });
  const auto r = run({KOLO_ELASTIC_WORKER_PATH, "150"}, {{"KOLO_PEER_TIMEOUT", "2"}, {"KOLO_TEST_PROGRESS_FILE", progress}});
  cut.join();
  std::remove(progress.c_str());
  expect_two_survivors(r, 150);
  EXPECT_NE(r.err.find("blames worker 2"), std::string::npos) << r.out << "\n---\n" << r.err;
}

}  // namespace
