// Parameter-server mode through the public API: the whole collective suite
// (every collective, dtype, op and size, grouped allreduce and join) on workers
// whose allreduces go through kolo-server processes, checked against the same
// rank-order references as the ranks' own allreduce, so the mode gives the same
// bits; and a job whose servers never came names them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/collective_suite.h"
#include "harness/multiprocess.h"
#include "harness/time_bound.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::int64_t kFusionThreshold = 64 * 1024;

struct Layout {
  int workers;
  int servers;
};

class PsCollectives : public ::testing::TestWithParam<Layout> {};

TEST_P(PsCollectives, EveryOpEveryDtypeEverySizeGivesTheRankOrderBits) {
  SpawnOptions options;
  options.servers = GetParam().servers;
  options.env["KOLO_FUSION_THRESHOLD"] = std::to_string(kFusionThreshold);
  // Small partitions: fused batches and the larger tensors cross every server.
  options.env["KOLO_PS_PARTITION_BYTES"] = "16384";
  options.timeout = std::chrono::seconds(300);
  run_ranks(
      GetParam().workers,
      [](int) {
        kolo::init();
        SuiteFailures failures([](const std::string& message) { ADD_FAILURE() << message; });
        sweep_every_collective({.fusion_threshold = kFusionThreshold, .large_bytes = 1 << 20}, failures);
        check_barrier_grouped_and_join(failures);
        kolo::shutdown();
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Layouts, PsCollectives, ::testing::Values(Layout{1, 1}, Layout{2, 1}, Layout{3, 2}),
                         [](const auto& info) {
                           return std::to_string(info.param.workers) + "workers_" +
                                  std::to_string(info.param.servers) + "servers";
                         });

// Several sessions in one job: each init() after a shutdown() is served again.
TEST(PsSessions, ServersServeEveryInitOfTheJob) {
  SpawnOptions options;
  options.servers = 2;
  run_ranks(2, [](int) {
    for (int session = 0; session < 3; ++session) {
      kolo::init();
      float x = static_cast<float>(kolo::rank() + session);
      kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum});
      EXPECT_EQ(x, static_cast<float>(1 + 2 * session));
      kolo::shutdown();
    }
  }, options);
}

// Workers that would cut their calls into other partitions fail init() alike,
// naming the setting, rather than pushing out of step at the first large
// allreduce; the next session, agreed, is served.
TEST(PsSessions, PartitionSizesThatDifferFailInitAlike) {
  SpawnOptions options;
  options.servers = 1;
  run_ranks(2, [](int rank) {
    setenv("KOLO_PS_PARTITION_BYTES", rank == 0 ? "16384" : "32768", 1);
    try {
      kolo::init();
      ADD_FAILURE() << "init() succeeded";
      kolo::shutdown();
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_PS_PARTITION_BYTES is 16384 on rank 0; 32768 on rank 1"),
                std::string::npos)
          << e.what();
    }
    unsetenv("KOLO_PS_PARTITION_BYTES");
    kolo::init();
    std::vector<float> x(100000, 1.0f);
    kolo::allreduce(make_tensor(x.data(), x.size()), {.op = ReduceOp::Sum});
    EXPECT_EQ(x.back(), 2.0f);
    kolo::shutdown();
  }, options);
}

// KOLO_NUM_SERVERS without servers: init() fails within KOLO_START_TIMEOUT,
// naming a server, instead of hanging.
TEST(PsSessions, MissingServersAreNamedAtInit) {
  SpawnOptions options;
  options.env["KOLO_NUM_SERVERS"] = "2";
  options.env["KOLO_START_TIMEOUT"] = "2";
  run_ranks(2, [](int) {
    const auto start = std::chrono::steady_clock::now();
    try {
      kolo::init();
      ADD_FAILURE() << "init() succeeded without servers";
    } catch (const kolo::Error& e) {
      EXPECT_NE(std::string(e.what()).find("server "), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, time_bound(8s));
  }, options);
}

}  // namespace
}  // namespace kolo::testing
