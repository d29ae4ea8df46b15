// The express path of a blocking allreduce (Engine::express): a cached allreduce
// small enough for the agreement step runs in that one step on the calling thread,
// without queue, entry or handle; anything else is left to the ordinary path, and
// a step that does not finish the operation hands it over as an ordinary one.
// Engines run on real shared-memory communicators in real processes; a forwarding
// communicator counts their collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "harness/counted_engine.h"
#include "harness/time_bound.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Express = engine::Engine::Express;

struct Call {
  std::string name;
  std::vector<float> in, out;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0, postscale = 1.0;
  Shape shape() const { return {static_cast<std::int64_t>(in.size())}; }
};

// Runs `call` through the express path; a Pending operation is waited for.
// NotApplicable did nothing, so it is tried once more a moment later: a background
// thread that started while the test submitted its first operation may have run
// that cycle and still hold it (the express path never waits for the cycle).
Express express(engine::Engine& engine, Call& call) {
  const Shape shape = call.shape();
  const engine::AllreduceCall view{call.name, call.in.data(), call.out.data(), DataType::Float32,
                                   shape,     call.op,        call.prescale,   call.postscale};
  std::shared_ptr<detail::OpState> pending;
  Express outcome = engine.express(view, pending);
  if (outcome == Express::NotApplicable) {
    std::this_thread::sleep_for(20ms);
    outcome = engine.express(view, pending);
  }
  EXPECT_EQ(outcome == Express::Pending, pending != nullptr);
  if (pending) wait(engine, pending);
  return outcome;
}

// The ordinary path: a first call fills the response cache.
void ordinary(engine::Engine& engine, Call& call) {
  allreduce(engine, call.name, call.in, call.out, call.op, call.prescale, call.postscale);
}

TEST(EngineExpress, ACachedSmallAllreduceIsDoneInOneCollective) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    Call call{"loss", {0.0f, 0.0f}, {0.0f, 0.0f}};
    ordinary(*engine, call);
    for (int step = 0; step < 50; ++step) {
      call.in = {static_cast<float>(rank + step), 0.5f * rank};
      const int before = comm->collectives();
      ASSERT_EQ(express(*engine, call), Express::Done) << "step " << step;
      EXPECT_EQ(comm->collectives() - before, 1);
      EXPECT_EQ(call.out, (std::vector<float>{static_cast<float>(1 + 2 * step), 0.5f}));
    }
  }, no_store());
}

TEST(EngineExpress, ResultsAreBitForBitThoseOfTheOrdinaryPath) {
  run_ranks(3, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    const std::vector<float> in = {1.0f / (rank + 3), static_cast<float>(rank) - 0.7f, 1e-3f * rank};
    Call avg{"avg", in, std::vector<float>(3), ReduceOp::Average};
    Call scaled{"scaled", in, std::vector<float>(3), ReduceOp::Sum, 0.5, 3.0};
    ordinary(*engine, avg);
    ordinary(*engine, scaled);
    const std::vector<float> expected_avg = avg.out, expected_scaled = scaled.out;
    ASSERT_EQ(express(*engine, avg), Express::Done);
    ASSERT_EQ(express(*engine, scaled), Express::Done);
    EXPECT_EQ(avg.out, expected_avg);
    EXPECT_EQ(scaled.out, expected_scaled);
  }, no_store());
}

TEST(EngineExpress, DoesNotApplyToWhatTheCacheDoesNotHoldOrWhileOtherWorkIsPending) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 16);
    Call small{"small", {1.0f}, {0.0f}};
    EXPECT_EQ(express(*engine, small), Express::NotApplicable);  // not cached yet
    ordinary(*engine, small);
    Call reshaped{"small", {1.0f, 2.0f}, {0.0f, 0.0f}};
    EXPECT_EQ(express(*engine, reshaped), Express::NotApplicable);  // cached with another shape
    Call other_op{"small", {1.0f}, {0.0f}, ReduceOp::Max};
    EXPECT_EQ(express(*engine, other_op), Express::NotApplicable);
    // While another operation is pending on this rank the ordinary cycle runs.
    Call pending_call{"pending", {1.0f}, {0.0f}};
    ordinary(*engine, pending_call);
    auto state = submit_allreduce(*engine, "pending", pending_call.in, pending_call.out);
    EXPECT_EQ(express(*engine, small), Express::NotApplicable);
    wait(*engine, state);
  }, no_store());
}

// Above the eager size, or without eager bytes (the step then carries no data, not
// even an empty tensor's), the step is followed by one collective for the data.
TEST(EngineExpress, WhatTheStepCannotCarryTakesOneCollectiveMore) {
  run_ranks(2, [](int rank) {
    for (const std::size_t eager : {std::size_t{0}, std::size_t{16}}) {
      auto [engine, comm] = make_counted_engine(rank, eager, "-" + std::to_string(eager));
      std::vector<Call> calls = {{"empty", {}, {}},
                                 {"one", {1.0f + rank}, {0.0f}},
                                 {"large", std::vector<float>(5, 1.0f + rank), std::vector<float>(5)},
                                 {"scaled", {1.0f + rank, 2.0f}, {0.0f, 0.0f}, ReduceOp::Average, 2.0, 3.0}};
      for (Call& call : calls) {
        ordinary(*engine, call);
        const std::vector<float> expected = call.out;
        std::fill(call.out.begin(), call.out.end(), 0.0f);
        const int before = comm->collectives();
        EXPECT_EQ(express(*engine, call), Express::Done) << call.name;
        const bool carried = eager > 0 && call.in.size() * sizeof(float) <= eager;
        EXPECT_EQ(comm->collectives() - before, carried ? 1 : 2) << call.name << ", eager bytes " << eager;
        EXPECT_EQ(call.out, expected) << call.name;
      }
    }
  }, no_store());
}

// Bits: "b" 0, "a" 1. Both ranks fill the cache; then rank 0 runs "a" and "b"
// express while rank 1 has both pending as ordinary operations (and so offers "b"
// when it fits the step). Checks the results and returns rank 0's outcomes and the
// collectives taken.
struct HandOver {
  Express a, b;
  int collectives;
};
HandOver express_beside_pending_peer(int rank, std::size_t eager_bytes, std::size_t floats) {
  auto [engine, comm] = make_counted_engine(rank, eager_bytes);
  Call a{"a", std::vector<float>(floats, 1.0f + rank), std::vector<float>(floats)};
  Call b{"b", std::vector<float>(floats, 10.0f * (rank + 1)), std::vector<float>(floats)};
  ordinary(*engine, b);
  ordinary(*engine, a);
  const int before = comm->collectives();
  HandOver outcome{Express::NotApplicable, Express::NotApplicable, 0};
  if (rank == 0) {
    outcome.a = express(*engine, a);
    outcome.b = express(*engine, b);
  } else {
    auto pending_b = submit_allreduce(*engine, "b", b.in, b.out);
    auto pending_a = submit_allreduce(*engine, "a", a.in, a.out);
    wait(*engine, pending_a);
    wait(*engine, pending_b);
  }
  EXPECT_EQ(a.out, std::vector<float>(floats, 3.0f));
  EXPECT_EQ(b.out, std::vector<float>(floats, 30.0f));
  outcome.collectives = comm->collectives() - before;
  return outcome;
}

// Rank 0's step offers "a", rank 1's "b": the offers differ, so rank 0's "a"
// becomes an ordinary operation, which runs as a collective in the same cycle;
// "b" then goes express on rank 0.
TEST(EngineExpress, AStepThatDoesNotFinishTheOperationHandsItOver) {
  run_ranks(2, [](int rank) {
    const HandOver h = express_beside_pending_peer(rank, 64, 1);
    if (rank == 0) {
      EXPECT_EQ(h.a, Express::Pending);
      EXPECT_EQ(h.b, Express::Done);
    }
    EXPECT_EQ(h.collectives, 3);  // "a": the step, then its data; "b": one step
  }, no_store());
}

// Too large to ride in the step, nothing is offered: "a", ready everywhere, is done
// on rank 0 by the one collective rank 1's cycle runs for its batch of "a".
TEST(EngineExpress, ALargeOperationIsDoneBesideAPeerWithMoreWorkPending) {
  run_ranks(2, [](int rank) {
    const HandOver h = express_beside_pending_peer(rank, 8, 4);
    if (rank == 0) {
      EXPECT_EQ(h.a, Express::Done);
      EXPECT_EQ(h.b, Express::Done);
    }
    EXPECT_EQ(h.collectives, 4);  // each: the step, then its data
  }, no_store());
}

// The same name cached with different shapes on the two ranks: rank 1 invalidates
// the bit in the step rank 0 runs express, and both get the coordinator's error.
TEST(EngineExpress, RanksThatDisagreeGetTheOrdinaryMismatchError) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    Call x{"x", {1.0f}, {0.0f}};
    ordinary(*engine, x);
    try {
      if (rank == 0) {
        express(*engine, x);
      } else {
        Call reshaped{"x", {1.0f, 2.0f}, {0.0f, 0.0f}};
        ordinary(*engine, reshaped);
      }
      ADD_FAILURE() << "rank " << rank << ": the mismatched allreduce succeeded";
    } catch (const MismatchError& e) {
      EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
    }
  }, no_store());
}

// A rank stuck in an express step names the operation in its flight record, as an
// ordinary pending one would (what kolorun reports on a timeout or SIGUSR1).
TEST(EngineExpress, ARankWaitingInTheStepShowsTheOperationInItsFlightRecord) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64, "", 16);
    Call x{"loss.x", {1.0f}, {0.0f}};
    ordinary(*engine, x);
    if (rank == 1) std::this_thread::sleep_for(time_bound(500ms));
    // Rank 0 reads its record until it shows the operation waiting, or its step is over.
    constexpr const char* kWaiting = R"("name":"loss.x","op":"allreduce","bytes":4,"state":"negotiating")";
    std::string seen;
    std::atomic<bool> over{false};
    std::thread reader;
    if (rank == 0) {
      reader = std::thread([&engine = engine, &seen, &over, kWaiting] {
        do {
          std::this_thread::sleep_for(5ms);
          seen = engine->flight_recorder()->to_json("test");
        } while (seen.find(kWaiting) == std::string::npos && !over);
      });
    }
    EXPECT_EQ(express(*engine, x), Express::Done);
    over = true;
    EXPECT_EQ(x.out[0], 2.0f);
    if (rank == 0) {
      reader.join();
      EXPECT_NE(seen.find(kWaiting), std::string::npos) << seen;
    }
  }, no_store());
}

// Rank 1 dies (no destructors run) instead of taking part in rank 0's step.
TEST(EngineExpress, APeerThatDiesDuringTheStepIsAnErrorNotAHang) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    Call x{"x", {1.0f}, {0.0f}};
    ordinary(*engine, x);
    if (rank == 1) {
      std::this_thread::sleep_for(100ms);
      std::_Exit(0);
    }
    EXPECT_THROW(express(*engine, x), PeerFailureError);
    // The engine has stopped: later calls fail at once.
    EXPECT_EQ(express(*engine, x), Express::NotApplicable);
    EXPECT_THROW(ordinary(*engine, x), Error);
  }, no_store());
}

}  // namespace
}  // namespace kolo::testing
