// bench/mapped_allreduce as a user runs it: a row per size with a checked result
// (a wrong sum fails the run), JSON that scripts can read, and a clear error
// (exit 2) for bad input or a CPU mask with one CPU, never a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/subprocess.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

TEST(MappedAllreduce, ReportsATimePerSizeWithResultsChecked) {
  auto r = run_command(
      {MAPPED_ALLREDUCE_PATH, "--min-bytes", "1M", "--max-bytes", "3M", "--step-factor", "2", "--iters", "3", "--json"},
      120s);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u) << r.out;
  EXPECT_EQ(j["results"][0]["bytes"], 1 << 20);
  EXPECT_EQ(j["results"][1]["bytes"], 2 << 20);
  for (const auto& row : j["results"]) {
    EXPECT_GT(row["median_us"].get<double>(), 0) << row;
    EXPECT_GT(row["busbw_gbps"].get<double>(), 0) << row;
  }
}

TEST(MappedAllreduce, BadSizeIsAClearError) {
  auto r = run_command({MAPPED_ALLREDUCE_PATH, "--max-bytes", "plenty"}, 30s);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("mapped_allreduce:"), std::string::npos) << r.err;
}

TEST(MappedAllreduce, OneCpuIsAClearError) {
  auto r = run_command({"taskset", "-c", "0", MAPPED_ALLREDUCE_PATH, "--max-bytes", "1M"}, 30s);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("needs two CPUs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kolo::testing
