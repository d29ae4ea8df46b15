// A failure is named within KOLO_PEER_TIMEOUT (plus a second) whatever the store
// does: a rank that finds a peer dead offers its verdict to the store, and a
// store that no longer answers (kolorun stopped, its host cut off) must not hold
// the report back for the minute a busy store may take.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "harness/kolorun_process.h"
#include "harness/temp_dir.h"
#include "harness/time_bound.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using kolo::testing::KolorunProcess;
using kolo::testing::time_bound;

pid_t pid_in(const std::string& path) {
  std::ifstream in(path);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

// Exited: gone, or a zombie its stopped parent has not reaped.
bool exited(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const auto close = stat.rfind(')');
  return close == std::string::npos || stat.size() < close + 3 || stat[close + 2] == 'Z';
}

TEST(KolorunLostStore, SurvivorsNameAKilledRankWhileKolorunIsStopped) {
  kolo::testing::TempDir dir("kolorun_lost_store_test");
  KolorunProcess kolorun(KOLORUN_PATH, {"-np", "3", "env", "KOLO_BACKEND=tcp", "KOLO_PEER_TIMEOUT=5", KOLO_STUCK_PATH,
                                        "steady", dir.file("running")});
  const auto started = Clock::now() + time_bound(30s);
  while (!(fs::exists(dir.file("running.0")) && fs::exists(dir.file("running.1")) &&
           fs::exists(dir.file("running.2"))) &&
         Clock::now() < started)
    std::this_thread::sleep_for(10ms);
  std::this_thread::sleep_for(100ms);  // every pid written
  const pid_t r0 = pid_in(dir.file("running.0")), r1 = pid_in(dir.file("running.1")),
              r2 = pid_in(dir.file("running.2"));
  ASSERT_GT(r0, 0);
  ASSERT_GT(r1, 0);
  ASSERT_GT(r2, 0);
  // kolorun, and so the store it serves, stops answering; then rank 1 dies.
  ASSERT_EQ(::kill(kolorun.pid(), SIGSTOP), 0);
  const auto killed = Clock::now();
  ::kill(r1, SIGKILL);
  const auto deadline = killed + 30s;
  while (!(exited(r0) && exited(r2)) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  const auto took = Clock::now() - killed;
  ::kill(kolorun.pid(), SIGCONT);
  const auto result = kolorun.wait(time_bound(30s));
  EXPECT_TRUE(exited(r0) && exited(r2)) << "the survivors still wait, 30 s after the kill";
  EXPECT_LT(took, time_bound(6s)) << "KOLO_PEER_TIMEOUT is 5 s";
  EXPECT_NE(result.exit_code, 0);
  for (const std::string rank : {"0", "2"}) {
    const auto at = result.err.find("[" + rank + "]<stderr>:rank " + rank + ": ");
    ASSERT_NE(at, std::string::npos) << result.err;
    EXPECT_NE(result.err.substr(at, result.err.find('\n', at) - at).find("rank 1"), std::string::npos) << result.err;
  }
}

}  // namespace
