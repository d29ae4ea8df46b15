// Small cached allreduces carried in the negotiation step (engine/agreement.h):
// one collective per operation instead of two, the same results, a fallback
// when the ranks offer different operations, and a clear error when the ranks
// are configured differently. Engines run on real shared-memory communicators in
// real processes; a forwarding communicator counts their collectives.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/shm/shm_communicator.h"
#include "engine/engine.h"
#include "harness/forwarding_communicator.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using engine::Engine;
using engine::EngineConfig;
using engine::Entry;
using engine::Request;

struct CountedEngine {
  std::shared_ptr<Engine> engine;
  ForwardingCommunicator* comm;  // owned by the engine
};

// The background thread sleeps (cycle time 10 s, no stall checks), so the only
// cycles are the ones the blocking callers drive: every collective counted
// belongs to an operation of the test.
// Engines of one test need different `job` names: each has a segment of its own.
CountedEngine make_engine(int rank, std::optional<std::size_t> eager_bytes, const std::string& job = "") {
  const int size = std::atoi(std::getenv("KOLO_SIZE"));
  const std::string job_id = std::getenv("KOLO_JOB_ID") + job;
  auto counted = std::make_unique<ForwardingCommunicator>(comm::make_shm_communicator(rank, size, job_id, {}));
  ForwardingCommunicator* comm = counted.get();
  EngineConfig config;
  config.cycle_time = 10s;
  config.stall_check_time = 0ms;
  config.flight_recorder_size = 0;
  config.eager_bytes = eager_bytes;
  return {std::make_shared<Engine>(std::move(counted), config), comm};
}

std::shared_ptr<detail::OpState> submit_allreduce(Engine& engine, const std::string& name, std::vector<float>& in,
                                                  std::vector<float>& out, ReduceOp op = ReduceOp::Sum,
                                                  double prescale = 1.0, double postscale = 1.0) {
  Request r;
  r.name = name;
  r.op = engine::OpType::Allreduce;
  r.dtype = DataType::Float32;
  r.reduce_op = op;
  r.shape = {static_cast<std::int64_t>(in.size())};
  r.prescale = prescale;
  r.postscale = postscale;
  auto state = std::make_shared<detail::OpState>(name);
  std::vector<Entry> entries;
  entries.push_back(Entry{r, make_tensor(in.data(), static_cast<std::int64_t>(in.size())),
                          make_tensor(out.data(), static_cast<std::int64_t>(out.size())), state});
  engine.submit(entries, false);
  return state;
}

void wait(Engine& engine, const std::shared_ptr<detail::OpState>& state) {
  engine.drive(*state, std::chrono::steady_clock::now() + 30s);
  state->wait();
}

void allreduce(Engine& engine, const std::string& name, std::vector<float>& in, std::vector<float>& out,
               ReduceOp op = ReduceOp::Sum, double prescale = 1.0, double postscale = 1.0) {
  wait(engine, submit_allreduce(engine, name, in, out, op, prescale, postscale));
}

SpawnOptions no_store() {
  SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  return options;
}

// Collectives per repeated cached allreduce of `floats` floats on 2 ranks, after
// a first call that fills the cache; checks every result.
double collectives_per_call(int rank, std::optional<std::size_t> eager_bytes, std::size_t floats) {
  auto [engine, comm] = make_engine(rank, eager_bytes);
  std::vector<float> in(floats), out(floats);
  constexpr int kCalls = 40;
  int before = 0;
  for (int call = -1; call < kCalls; ++call) {
    if (call == 0) before = comm->collectives();
    for (std::size_t i = 0; i < floats; ++i) in[i] = static_cast<float>((rank + 1) * (call + 2) + i);
    allreduce(*engine, "metric", in, out);
    for (std::size_t i = 0; i < floats; ++i) EXPECT_EQ(out[i], 3.0f * (call + 2) + 2.0f * i) << "call " << call;
  }
  return static_cast<double>(comm->collectives() - before) / kCalls;
}

TEST(EngineEager, ASmallCachedAllreduceTakesOneCollective) {
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, 256, 2), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 16), 1.0);  // the default: 64 bytes in small jobs
  }, no_store());
}

TEST(EngineEager, WithoutItOrAboveItsSizeTheDataTakesASecondCollective) {
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, 0, 2), 2.0);
    EXPECT_EQ(collectives_per_call(rank, 256, 65), 2.0);  // 260 bytes
  }, no_store());
}

TEST(EngineEager, AverageAndScaleFactorsMatchTheCollectivePath) {
  run_ranks(3, [](int rank) {
    auto eager = make_engine(rank, 256, "-eager");
    auto plain = make_engine(rank, 0, "-plain");
    for (int call = 0; call < 3; ++call) {  // the first fills the cache, then eager
      std::vector<float> in = {1.0f / (rank + 3), static_cast<float>(rank) - 0.7f, 1e-3f * rank};
      std::vector<float> a(3), b(3), c(3), d(3);
      allreduce(*eager.engine, "avg", in, a, ReduceOp::Average);
      allreduce(*plain.engine, "avg", in, b, ReduceOp::Average);
      allreduce(*eager.engine, "scaled", in, c, ReduceOp::Sum, 0.5, 3.0);
      allreduce(*plain.engine, "scaled", in, d, ReduceOp::Sum, 0.5, 3.0);
      EXPECT_EQ(a, b);  // bit for bit: both reduce in rank order
      EXPECT_EQ(c, d);
    }
  }, no_store());
}

// Rank 1 has two operations ready and offers the lower bit; rank 0 has only the
// other one: the offers differ, the common one runs as a collective, and the
// second runs eagerly once rank 0 submits it too.
TEST(EngineEager, RanksOfferingDifferentOperationsFallBackAndStillAgree) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_engine(rank, 256);
    std::vector<float> in_a = {1.0f + rank}, in_b = {10.0f * (rank + 1)}, a(1), b(1);
    allreduce(*engine, "b", in_b, b);  // bit 0
    allreduce(*engine, "a", in_a, a);  // bit 1
    a = b = {0.0f};
    const int before = comm->collectives();
    if (rank == 0) {
      allreduce(*engine, "a", in_a, a);
      allreduce(*engine, "b", in_b, b);
    } else {
      auto pending_b = submit_allreduce(*engine, "b", in_b, b);
      auto pending_a = submit_allreduce(*engine, "a", in_a, a);
      wait(*engine, pending_a);
      wait(*engine, pending_b);
    }
    EXPECT_EQ(a[0], 3.0f);
    EXPECT_EQ(b[0], 30.0f);
    // "a": the agreement step, then its data; "b": one step.
    EXPECT_EQ(comm->collectives() - before, 3);
  }, no_store());
}

TEST(EngineEager, EagerSizesThatDifferAcrossRanksAreAClearError) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_engine(rank, rank == 0 ? 256 : 64);
    std::vector<float> in = {1.0f}, out(1);
    try {
      allreduce(*engine, "x", in, out);
      ADD_FAILURE() << "the allreduce succeeded";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_EAGER_BYTES or KOLO_CACHE_CAPACITY differ across ranks"),
                std::string::npos)
          << e.what();
    }
  }, no_store());
}

}  // namespace
}  // namespace kolo::testing
