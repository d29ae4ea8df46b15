// kolo-flight-report's verdicts from hand-written flight records.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "flight_report.h"
#include "harness/subprocess.h"

namespace {

std::string record(int rank, const std::string& ops) {
  return "{\"rank\":" + std::to_string(rank) + ",\"size\":3,\"reason\":\"stall\",\"now_us\":5000000,\"records\":[" + ops + "]}";
}

std::string op(int seq, const std::string& name, const std::string& state, long submitted_us) {
  return "{\"seq\":" + std::to_string(seq) + ",\"name\":\"" + name + "\",\"op\":\"allreduce\",\"bytes\":4,\"state\":\"" +
         state + "\",\"submitted_us\":" + std::to_string(submitted_us) + ",\"started_us\":0,\"finished_us\":0}";
}

TEST(FlightReport, NamesTheRankThatNeverSubmitted) {
  std::vector<std::string> ranks = {
      record(0, op(1, "a", "done", 0) + "," + op(2, "x", "negotiating", 1000000)),
      record(1, op(1, "a", "done", 0) + "," + op(2, "x", "negotiating", 1500000)),
      record(2, op(1, "a", "done", 0)),
  };
  auto report = kolo::flight::report_for_records(ranks, 3);
  EXPECT_NE(report.find("verdict: rank(s) 2 behind: 'x' is pending on rank(s) 0, 1 for 4.0 s"), std::string::npos)
      << report;
  EXPECT_NE(report.find("rank 2 (stall): last completed #1 'a', nothing pending"), std::string::npos) << report;
}

TEST(FlightReport, MissingAndUnreadableRecordsAreNamed) {
  auto report = kolo::flight::report_for_records({record(0, op(1, "x", "executing", 0)), "{not json"}, 3);
  EXPECT_NE(report.find("no flight record from rank(s) 1, 2"), std::string::npos) << report;
  EXPECT_NE(report.find("could not be read"), std::string::npos) << report;
}

TEST(FlightReport, EverySubmittedButStuckPointsAtTheTransport) {
  auto report = kolo::flight::report_for_records(
      {record(0, op(1, "x", "executing", 0)), record(1, op(1, "x", "executing", 0))}, 2);
  EXPECT_NE(report.find("submitted by every rank but has not completed"), std::string::npos) << report;
}

TEST(FlightReport, UnreadableDirectory) {
  auto report = kolo::flight::report_for_directory("/nonexistent/kolo-flight");
  EXPECT_NE(report.find("cannot read"), std::string::npos) << report;
}

// The tool printed its errors on stdout and exited 0.
TEST(FlightReportTool, NoReportIsAnErrorOnStderr) {
  auto missing = kolo::testing::run_command({KOLO_FLIGHT_REPORT_PATH, "/nonexistent/kolo-flight"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.out, "");
  EXPECT_NE(missing.err.find("kolo-flight-report: cannot read /nonexistent/kolo-flight"), std::string::npos)
      << missing.err;
  auto empty = kolo::testing::run_command({KOLO_FLIGHT_REPORT_PATH, "/"});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_EQ(empty.out, "");
  EXPECT_NE(empty.err.find("no flight record"), std::string::npos) << empty.err;
  auto bad_size = kolo::testing::run_command({KOLO_FLIGHT_REPORT_PATH, "/", "three"});
  EXPECT_EQ(bad_size.exit_code, 2);
  EXPECT_NE(bad_size.err.find("SIZE"), std::string::npos) << bad_size.err;
}

}  // namespace
