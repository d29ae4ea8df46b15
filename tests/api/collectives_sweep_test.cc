// Every collective x every dtype x sizes x job sizes 1-4, checked on every rank
// against a local reference (exact for integers) and bitwise equal across ranks,
// then barrier, grouped allreduce and join (tests/harness/collective_suite.h).
// Forked ranks on this host; kolorun_multihost_test.cc runs the same suite as a
// program across hosts and under mpirun.
#include <gtest/gtest.h>

#include <string>

#include "harness/collective_suite.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

// The fusion threshold is lowered so that the larger sizes exceed it.
constexpr std::int64_t kFusionThreshold = 64 * 1024;
constexpr std::int64_t kLargeBytes = 1 << 20;

class CollectivesSweep : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesSweep, EveryOpEveryDtypeEverySize) {
  SpawnOptions options;
  options.env["KOLO_FUSION_THRESHOLD"] = std::to_string(kFusionThreshold);
  options.timeout = std::chrono::seconds(300);
  run_ranks(
      GetParam(),
      [](int) {
        kolo::init();
        SuiteFailures failures([](const std::string& message) { ADD_FAILURE() << message; });
        sweep_every_collective({.fusion_threshold = kFusionThreshold, .large_bytes = kLargeBytes}, failures);
        check_barrier_grouped_and_join(failures);
        kolo::shutdown();
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesSweep, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace kolo::testing
