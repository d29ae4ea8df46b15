// kolorun and the flight recorder: when a job fails or times out, or on SIGUSR1,
// kolorun asks every rank for its flight record and says which rank is behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "harness/kolorun_process.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

TEST(KolorunFlightRecorder, TimeoutNamesTheRankThatNeverSubmitted) {
  auto result = run_kolorun_at(KOLORUN_PATH, {"-np", "3", "--timeout", "3", KOLO_STUCK_PATH, "stuck"}, 30s);
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_NE(result.err.find("verdict: rank(s) 1, 2 behind: 'x' is pending on rank(s) 0"), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find("rank 1 (SIGUSR1): last completed #1 'warmup', nothing pending"), std::string::npos)
      << result.err;
}

TEST(KolorunFlightRecorder, AFailedRankIsReportedWithWhatTheOthersWaitFor) {
  auto result = run_kolorun_at(KOLORUN_PATH, {"-np", "2", KOLO_STUCK_PATH, "fail"}, 30s);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_NE(result.err.find("rank 1 (pid"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("no flight record from rank(s) 1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("'x' (negotiating"), std::string::npos) << result.err;
}

TEST(KolorunFlightRecorder, Sigusr1ReportsWithoutStoppingTheJob) {
  KolorunProcess kolorun(KOLORUN_PATH, {"-np", "2", "--timeout", "4", KOLO_STUCK_PATH, "stuck"});
  std::this_thread::sleep_for(1500ms);
  kill(kolorun.pid(), SIGUSR1);
  auto result = kolorun.wait(30s);
  EXPECT_NE(result.err.find("received SIGUSR1"), std::string::npos) << result.err;
  // The job went on until its timeout, then reported again.
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_GE(result.elapsed, 4s);
}

TEST(KolorunFlightRecorder, SignalsOnlyKoloProcessesNotWrapperScripts) {
  // The rank is a shell script around the program: SIGUSR1 to the whole group
  // would kill the shell; kolorun signals only the kolo process.
  auto result = run_kolorun_at(KOLORUN_PATH,
                               {"-np", "2", "--timeout", "3", "sh", "-c", std::string(KOLO_STUCK_PATH) + " stuck; echo done $?"},
                               30s);
  EXPECT_EQ(result.exit_code, 124) << result.err;
  EXPECT_NE(result.err.find("verdict: rank(s) 1 behind"), std::string::npos) << result.err;
  EXPECT_EQ(result.out.find("done 138"), std::string::npos) << "a wrapper died of SIGUSR1: " << result.out;
}

}  // namespace
}  // namespace kolo::testing
