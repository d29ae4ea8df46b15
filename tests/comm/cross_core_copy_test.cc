// bench/cross_core_copy as a user runs it: one row per slot size with all three
// rates, JSON that scripts can read, and a clear error (exit 2) for bad input
// or a CPU mask with one CPU, never a hang.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/subprocess.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

TEST(CrossCoreCopy, ReportsLocalCrossCoreAndCmaRatesPerSlotSize) {
  auto r = run_command({CROSS_CORE_COPY_PATH, "--min-bytes", "64K", "--max-bytes", "128K", "--iters", "3", "--json"},
                       120s);
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 2u) << r.out;
  EXPECT_EQ(j["results"][0]["slot_bytes"], 64 * 1024);
  EXPECT_EQ(j["results"][1]["slot_bytes"], 128 * 1024);
  for (const auto& row : j["results"]) {
    EXPECT_GT(row["local_gbps"].get<double>(), 0) << row;
    EXPECT_GT(row["cross_core_memcpy_gbps"].get<double>(), 0) << row;
    EXPECT_GT(row["cross_core_to_shared_gbps"].get<double>(), 0) << row;
    // Cross-memory attach may be refused (ptrace policy); it then reports 0.
    EXPECT_GE(row["cma_gbps"].get<double>(), 0) << row;
  }
}

TEST(CrossCoreCopy, BadSizeIsAClearError) {
  auto r = run_command({CROSS_CORE_COPY_PATH, "--min-bytes", "lots"}, 30s);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("cross_core_copy:"), std::string::npos) << r.err;
}

TEST(CrossCoreCopy, OneCpuIsAClearError) {
  auto r = run_command({"taskset", "-c", "0", CROSS_CORE_COPY_PATH, "--max-bytes", "64K"}, 30s);
  ASSERT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("needs two CPUs"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kolo::testing
