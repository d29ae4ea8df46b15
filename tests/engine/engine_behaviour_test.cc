// The engine's behaviour across real processes: matching by name in any order,
// fusion and the response cache under many small tensors, join, groups, scale
// factors, shutdown and timeouts.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/agreement.h"
#include "harness/multiprocess.h"
#include "harness/values.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

TEST(EngineBehaviour, RanksMaySubmitInDifferentOrders) {
  run_ranks(3, [](int rank) {
    kolo::init();
    std::vector<std::vector<float>> data(5, std::vector<float>(100, static_cast<float>(rank + 1)));
    std::vector<int> order(5);
    std::iota(order.begin(), order.end(), 0);
    std::mt19937 rng(rank * 7 + 1);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<Handle> handles;
    for (int i : order)
      handles.push_back(kolo::allreduce_async(make_tensor(data[i].data(), 100),
                                              {.op = ReduceOp::Sum, .name = "t" + std::to_string(i)}));
    for (auto& h : handles) h.wait();
    for (auto& d : data) EXPECT_EQ(d[0], 6.0f);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, HundredsOfSmallTensorsPerStep) {
  // A training-like step: 300 tensors of mixed dtypes and sizes, submitted in one
  // burst, ten times: fusion batches them and the response cache serves steps 2+.
  SpawnOptions options;
  options.env["KOLO_FUSION_THRESHOLD"] = "256K";
  for (int n : {2, 3}) run_ranks(n, [](int rank) {
      kolo::init();
      const DataType types[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::Int32};
      for (int step = 0; step < 10; ++step) {
        std::vector<std::vector<std::byte>> data;
        std::vector<Handle> handles;
        for (int t = 0; t < 300; ++t) {
          DataType dtype = types[t % 4];
          std::int64_t count = 1 + (t * 37) % 2000;
          data.push_back(make_values(rank, count, dtype, t));
          handles.push_back(kolo::allreduce_async(Tensor{data.back().data(), dtype, {count}},
                                                  {.op = ReduceOp::Sum, .name = "grad." + std::to_string(t)}));
        }
        for (int t = 0; t < 300; ++t) {
          handles[t].wait();
          DataType dtype = types[t % 4];
          std::int64_t count = 1 + (t * 37) % 2000;
          for (std::int64_t i = 0; i < count; i += 97) {
            double want = expected_reduction(kolo::size(), i, dtype, ReduceOp::Sum, t);
            ASSERT_NEAR(read_element(data[t].data(), dtype, i), want, tolerance(dtype, want)) << "tensor " << t;
          }
        }
      }
      kolo::shutdown();
    }, options);
}

TEST(EngineBehaviour, CachedNameWithANewShapeIsRenegotiated) {
  run_ranks(2, [](int rank) {
    kolo::init();
    for (std::int64_t count : {4, 4, 8, 8, 4, 16}) {
      std::vector<std::int64_t> v(count, rank + 1);
      kolo::allreduce(Tensor{v.data(), DataType::Int64, {count}}, {.op = ReduceOp::Sum, .name = "w"});
      EXPECT_EQ(v[count - 1], 3) << "count " << count;
    }
    // Only one rank changes the shape of a cached name: both learn of the mismatch.
    std::vector<std::int64_t> v(rank == 0 ? 4 : 5, 1);
    EXPECT_THROW(kolo::allreduce(Tensor{v.data(), DataType::Int64, {static_cast<std::int64_t>(v.size())}}, {.name = "w"}),
                 MismatchError);
    std::vector<std::int64_t> w(4, 1);
    kolo::allreduce(Tensor{w.data(), DataType::Int64, {4}}, {.op = ReduceOp::Sum, .name = "w"});
    EXPECT_EQ(w[0], 2);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, JoinedRanksContributeZeros) {
  run_ranks(3, [](int rank) {
    kolo::init();
    const int steps = rank == 0 ? 2 : 4;
    for (int s = 0; s < steps; ++s) {
      std::vector<double> v(10, rank + 1);
      kolo::allreduce(Tensor{v.data(), DataType::Float64, {10}}, {.op = ReduceOp::Sum, .name = "s" + std::to_string(s)});
      EXPECT_EQ(v[9], s < 2 ? 6.0 : 5.0) << "step " << s;
    }
    if (rank == 2) std::this_thread::sleep_for(300ms);
    EXPECT_EQ(kolo::join(), 2);
    // After everyone joined, the job works normally again.
    double x = 1.0;
    kolo::allreduce(Tensor{&x, DataType::Float64, {1}}, {.op = ReduceOp::Sum, .name = "after-join"});
    EXPECT_EQ(x, 3.0);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, GroupedAllreduceCompletesAsOne) {
  run_ranks(2, [](int rank) {
    kolo::init();
    std::vector<std::vector<float>> data(5, std::vector<float>(33, static_cast<float>(rank + 1)));
    std::vector<Tensor> tensors;
    for (auto& d : data) tensors.push_back(make_tensor(d.data(), 33));
    for (int step = 0; step < 3; ++step) {
      for (auto& d : data) std::fill(d.begin(), d.end(), static_cast<float>(rank + 1));
      kolo::grouped_allreduce(tensors, {.op = ReduceOp::Sum, .name = "group"});
      for (auto& d : data) EXPECT_EQ(d[32], 3.0f);
    }
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, ScaleFactorsAndOutOfPlace) {
  run_ranks(2, [](int rank) {
    kolo::init();
    std::vector<float> in(1000, static_cast<float>(rank + 1)), out(1000, -1.0f);
    kolo::allreduce(make_tensor(in.data(), 1000), make_tensor(out.data(), 1000),
                    {.op = ReduceOp::Sum, .prescale = 0.5, .postscale = 3.0, .name = "scaled"});
    EXPECT_FLOAT_EQ(out[999], (0.5f * 1 + 0.5f * 2) * 3.0f);
    EXPECT_EQ(in[0], static_cast<float>(rank + 1)) << "out of place must not touch the input";
    std::vector<double> avg(7, rank == 0 ? 1.0 : 2.0);
    kolo::allreduce(make_tensor(avg.data(), 7), {.op = ReduceOp::Average, .postscale = 4.0, .name = "avg-post"});
    EXPECT_DOUBLE_EQ(avg[0], 6.0);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, FloatResultsAreBitwiseIdenticalOnEveryRank) {
  run_ranks(3, [](int rank) {
    kolo::init();
    std::mt19937 rng(1234 + rank);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (std::int64_t count : {3, 1001, 300000}) {
      std::vector<float> v(count);
      for (auto& x : v) x = dist(rng) * 1e3f;
      kolo::allreduce(make_tensor(v.data(), count), {.op = ReduceOp::Average, .name = "avg" + std::to_string(count)});
      expect_bitwise_equal_everywhere(v.data(), v.size() * sizeof(float), "average of " + std::to_string(count));
    }
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, UnnamedOperationsMatchByCallSite) {
  run_ranks(2, [](int rank) {
    kolo::init();
    // One call site, reached five times on each rank: the names agree even though
    // rank 1 submits another operation first.
    auto five_unnamed = [] {
      for (int i = 0; i < 5; ++i) {
        float x = static_cast<float>(i);
        kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum});
        EXPECT_EQ(x, 2.0f * i);
      }
    };
    double y = 2.0;
    if (rank == 1) {
      Handle other = kolo::allreduce_async(make_tensor(&y, 1), {.op = ReduceOp::Sum, .name = "named"});
      five_unnamed();
      other.wait();
    } else {
      five_unnamed();
      kolo::allreduce(make_tensor(&y, 1), {.op = ReduceOp::Sum, .name = "named"});
    }
    EXPECT_EQ(y, 4.0);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, WaitWithTimeoutThenCompletes) {
  run_ranks(2, [](int rank) {
    kolo::init();
    float x = 1.0f;
    if (rank == 0) {
      Handle h = kolo::allreduce_async(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "late"});
      EXPECT_FALSE(h.poll());
      EXPECT_THROW(h.wait(50ms), TimeoutError);
      h.wait(10s);
      EXPECT_TRUE(h.poll());
    } else {
      std::this_thread::sleep_for(300ms);
      kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "late"});
    }
    EXPECT_EQ(x, 2.0f);
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, ShutdownFailsPendingOperations) {
  run_ranks(2, [](int rank) {
    kolo::init();
    if (rank == 0) {
      float x = 1.0f;
      Handle never = kolo::allreduce_async(make_tensor(&x, 1), {.name = "never-matched"});
      kolo::barrier({.name = "submitted"});
      auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(never.wait(20s), ShutdownError);
      EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
      EXPECT_THROW(kolo::barrier(), ShutdownError);
    } else {
      kolo::barrier({.name = "submitted"});
      kolo::shutdown();
    }
    kolo::shutdown();
  });
}

TEST(EngineBehaviour, ADeadPeerFailsPendingOperationsNamingIt) {
  SpawnOptions options;
  options.env["KOLO_PEER_TIMEOUT"] = "5";
  auto outcomes = spawn_ranks(3, [](int rank) {
    kolo::init();
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.name = "warmup"});
    if (rank == 2) raise(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    try {
      kolo::allreduce(make_tensor(&x, 1), {.name = "after-death"});
      ADD_FAILURE() << "allreduce with a dead peer succeeded";
    } catch (const PeerFailureError& e) {
      EXPECT_EQ(e.peer_rank(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("2"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1), {.name = "later"}), PeerFailureError);
    kolo::shutdown();
  }, options);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(outcomes[r].exited && outcomes[r].exit_code == 0) << "rank " << r << " code " << outcomes[r].exit_code;
  }
}

TEST(EngineBehaviour, InitNamesARankThatNeverStarted) {
  SpawnOptions options;
  options.env["KOLO_START_TIMEOUT"] = "1.5";
  auto outcomes = spawn_ranks(3, [](int rank) {
    if (rank == 1) return;  // never calls init
    try {
      kolo::init();
      ADD_FAILURE() << "init succeeded without rank 1";
    } catch (const TimeoutError& e) {
      EXPECT_NE(std::string(e.what()).find("rank(s) 1 "), std::string::npos) << e.what();
    }
  }, options);
  for (const auto& o : outcomes) EXPECT_EQ(o.exit_code, 0) << "rank " << o.rank;
}

TEST(EngineBehaviour, MalformedConfigurationIsRejected) {
  run_ranks(1, [](int) {
    setenv("KOLO_FUSION_THRESHOLD", "lots", 1);
    EXPECT_THROW(kolo::init(), InvalidArgumentError);
    unsetenv("KOLO_FUSION_THRESHOLD");
    setenv("KOLO_CYCLE_TIME", "-1", 1);
    EXPECT_THROW(kolo::init(), InvalidArgumentError);
    unsetenv("KOLO_CYCLE_TIME");
    setenv("KOLO_RANK", "5", 1);
    EXPECT_THROW(kolo::init(), InvalidArgumentError);
  }, {.use_store = false});
}


// A fused batch whose buffers overlap (two views of one array) must not go to the
// communicator's list-of-buffers path, which reads later inputs after writing
// earlier outputs; through the fusion buffer every input is read first.
TEST(EngineBehaviour, OverlappingTensorsOfABatchAreReducedFromTheirInputs) {
  SpawnOptions options;
  options.env = {{"KOLO_SHM_SLOT_BYTES", "65536"}};
  run_ranks(
      2,
      [](int rank) {
        kolo::init();
        constexpr std::size_t kView = 100000, kShift = 40000;
        std::vector<float> x(kView + kShift);
        auto fill = [&] {
          for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97 + rank);
        };
        std::vector<Tensor> views{make_tensor(x.data(), kView), make_tensor(x.data() + kShift, kView)};
        for (int step = 0; step < 2; ++step) {
          fill();
          kolo::grouped_allreduce(views, {.op = ReduceOp::Sum, .name = "overlap"});
          for (std::size_t i = 0; i < x.size(); i += 997)
            ASSERT_EQ(x[i], static_cast<float>(2 * (i % 97) + 1)) << "element " << i << ", step " << step;
        }
        kolo::shutdown();
      },
      options);
}

}  // namespace
}  // namespace kolo::testing
