// kolorun and the flight recorder: when a job fails or times out, or on SIGUSR1,
// kolorun asks every rank for its flight record and says which rank is behind.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "harness/kolorun_process.h"
#include "harness/temp_dir.h"

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

TEST(KolorunFlightRecorder, EachWorldOfTheJobIsReportedOnItsOwn) {
  // Two worlds (even and odd job ranks), each with its rank 0 waiting in 'x':
  // their records do not overwrite each other, and each gets its verdict.
  auto result = run_kolorun_at(KOLORUN_PATH, {"-np", "4", "--timeout", "3", KOLO_STUCK_PATH, "worlds-stuck"}, 30s);
  EXPECT_EQ(result.exit_code, 124) << result.err;
  std::size_t worlds = 0, verdicts = 0;
  for (auto at = result.err.find("a world of some of the job's ranks"); at != std::string::npos;
       at = result.err.find("a world of some of the job's ranks", at + 1))
    ++worlds;
  for (auto at = result.err.find("verdict: rank(s) 1 behind: 'x' is pending on rank(s) 0"); at != std::string::npos;
       at = result.err.find("verdict: rank(s) 1 behind: 'x' is pending on rank(s) 0", at + 1))
    ++verdicts;
  EXPECT_EQ(worlds, 2u) << result.err;
  EXPECT_EQ(verdicts, 2u) << result.err;
}

TEST(KolorunFlightRecorder, AFailedRankIsReportedWithWhatTheOthersWaitFor) {
  auto result = run_kolorun_at(KOLORUN_PATH, {"-np", "2", KOLO_STUCK_PATH, "fail"}, 30s);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_NE(result.err.find("rank 1 (pid"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("no flight record from rank(s) 1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("'x' (negotiating"), std::string::npos) << result.err;
}

TEST(KolorunFlightRecorder, RanksFoundDeadTogetherAreBlamedInTheOrderTheyFailed) {
  // kolorun is stopped while rank 1 exits and rank 0 dies of it, so it finds both
  // dead in one look: rank 0's flight record blames rank 1, which is reported first.
  KolorunProcess kolorun(KOLORUN_PATH, {"-np", "2", "--timeout", "60", KOLO_STUCK_PATH, "fail"});
  std::this_thread::sleep_for(300ms);
  ASSERT_EQ(kill(kolorun.pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(4s);
  ASSERT_EQ(kill(kolorun.pid(), SIGCONT), 0);
  auto result = kolorun.wait(30s);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  const auto first_failure = result.err.find("exited with code 3");
  const auto rank0 = result.err.find("rank 0 (pid");
  EXPECT_NE(first_failure, std::string::npos) << result.err;
  EXPECT_TRUE(rank0 == std::string::npos || first_failure < rank0) << result.err;
}

TEST(KolorunFlightRecorder, AnEarlierJobsRecordsInTheUsersDirectoryAreNotRead) {
  // An earlier job left rank 1's record in the directory the user keeps, blaming
  // rank 0. Rank 1 of this job fails on its own: kolorun names it at once, not
  // rank 0 after waiting for it, and reports no record from rank 1.
  TempDir dir("kolo-flight-stale");
  const auto stale = dir.path() / "rank1.json";
  std::ofstream(stale) << R"({"rank":1,"size":2,"pid":1,"reason":"error: from an earlier job","blames":0,)"
                       << R"("origin_unix_ms":0,"now_us":0,"records":[]})" << "\n";
  std::filesystem::last_write_time(stale, std::filesystem::file_time_type::clock::now() - std::chrono::hours(1));
  auto result = run_command({"env", "KOLO_FLIGHT_RECORDER_DIR=" + dir.path().string(), KOLORUN_PATH, "-np", "2", "sh",
                             "-c", "if [ $KOLO_RANK = 1 ]; then exit 3; fi; sleep 30"},
                            30s);
  EXPECT_EQ(result.exit_code, 3) << result.err;
  EXPECT_EQ(result.err.rfind("kolorun: rank 1 (pid ", 0), 0u) << result.err;
  EXPECT_EQ(result.err.find("failed first"), std::string::npos) << result.err;
  EXPECT_EQ(result.err.find("from an earlier job"), std::string::npos) << result.err;
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
