// The express path of a blocking call (Engine::express): a cached operation runs
// in its caller's own cycle, without queue (and, for an allreduce, without entry
// or handle), in one collective when the step carries it and otherwise in its
// step and one collective more; anything else is left to the ordinary path, and a
// step that does not finish the operation hands it over as an ordinary one, or,
// when every rank carried it, finishes it in the rest of the cycle. That the
// results are every other route's is engine_routes_test.cc.
// Engines run on real shared-memory communicators in real processes; a forwarding
// communicator counts their collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine_routes.h"
#include "harness/time_bound.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

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

// The largest input any rank gives `ops_of(rank, size)[index]`.
std::size_t largest_input(int size, std::size_t index) {
  std::size_t largest = 0;
  for (int r = 0; r < size; ++r) largest = std::max(largest, ops_of(r, size)[index].data.size() * sizeof(float));
  return largest;
}

// With every rank's input within the eager bytes the step carries the inputs and
// is the whole operation; otherwise one collective follows it. Either way the
// results are the ordinary path's, bit for bit.
TEST(EngineExpressOps, EachCachedOperationIsItsStepAloneOrItsStepAndOneCollective) {
  run_ranks(3, [](int rank) {
    // 40: the alltoall's inputs (36 to 60 bytes) fit on some ranks only.
    for (const std::size_t eager : {std::size_t{0}, std::size_t{40}, std::size_t{64}}) {
      auto [engine, comm] = make_counted_engine(rank, eager, "-" + std::to_string(eager));
      auto ops = ops_of(rank, 3);
      for (std::size_t k = 0; k < ops.size(); ++k) {
        Op& op = ops[k];
        const std::vector<float> input = op.data;
        const std::vector<std::byte> expected = run_ordinary(*engine, op);
        const bool carried = eager > 0 && largest_input(3, k) <= eager;
        for (int round = 0; round < 3; ++round) {
          op.data = input;
          const int before = comm->collectives();
          std::vector<std::byte> result;
          ASSERT_EQ(run_express(*engine, op, result), Express::Done) << op.request.name << ", round " << round;
          EXPECT_EQ(comm->collectives() - before, carried ? 1 : 2) << op.request.name << ", eager bytes " << eager;
          EXPECT_EQ(result, expected) << op.request.name << ", eager bytes " << eager << ", round " << round;
        }
      }
    }
  }, no_store());
}

TEST(EngineExpressOps, DoesNotApplyToWhatTheCacheDoesNotHold) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    Op op = ops_of(rank, 2).front();  // allgather
    std::vector<std::byte> result;
    const int at_start = comm->collectives();  // the engine's start agrees on the settings
    EXPECT_EQ(run_express(*engine, op, result), Express::NotApplicable);  // not cached yet
    EXPECT_EQ(comm->collectives(), at_start);
    run_ordinary(*engine, op);
    Op reshaped = op;
    reshaped.request.shape = {op.request.shape[0], 1};
    reshaped.data.resize(static_cast<std::size_t>(op.request.shape[0]));
    EXPECT_EQ(run_express(*engine, reshaped, result), Express::NotApplicable);  // cached with another shape
    EXPECT_EQ(run_express(*engine, op, result), Express::Done);
  }, no_store());
}

// Rank 1 brings a new operation besides the allgather to the step rank 0 runs
// express: the step ends in a coordinator round, so it does not finish the
// allgather there; rank 0's allgather becomes an ordinary operation (Pending),
// done in that same cycle.
TEST(EngineExpressOps, AStepThatDoesNotFinishTheOperationHandsItOver) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 64);
    Op gather = ops_of(rank, 2).front();
    std::vector<float> in = {1.0f + rank}, out = {0.0f};
    const std::vector<std::byte> expected = run_ordinary(*engine, gather);
    if (rank == 0) {
      std::vector<std::byte> result;
      EXPECT_EQ(run_express(*engine, gather, result), Express::Pending);
      EXPECT_EQ(result, expected);
      allreduce(*engine, "fresh", in, out);
    } else {
      auto fresh = submit_allreduce(*engine, "fresh", in, out);
      std::vector<engine::Entry> entries{gather.entry()};
      auto state = entries.front().state;
      engine->submit(entries, false);
      wait(*engine, state);
      EXPECT_EQ(result_of(gather, state), expected);
      wait(*engine, fresh);
    }
    EXPECT_EQ(out, std::vector<float>{3.0f});
  }, no_store());
}

// As a blocking API call runs it: the express path, else the ordinary one.
std::vector<std::byte> run_blocking(engine::Engine& engine, Op& op, Express& outcome) {
  engine::Entry entry = op.entry();
  auto state = entry.state;
  outcome = engine.express(entry);
  if (outcome == Express::NotApplicable) return run_ordinary(engine, op);
  wait(engine, state);
  return result_of(op, state);
}

// Every rank carries the same operation in a step that does not finish it,
// because rank 0 asks for a stall check in it (about every 100 ms here): the
// rest of that cycle finishes the carried operation from the gathered inputs as
// what it is (not as an allreduce), with the ordinary path's results.
TEST(EngineExpressOps, ACarriedOperationInAStepWithAStallCheckFinishesAsWhatItIs) {
  run_ranks(2, [](int rank) {
    CountedEngineOptions options;
    options.eager_bytes = 1024;
    options.stall_check_time = 400ms;
    auto [engine, comm] = make_counted_engine(rank, options);
    std::vector<Op> ops = ops_of(rank, 2);
    std::vector<std::vector<std::byte>> expected;
    for (Op& op : ops) expected.push_back(run_ordinary(*engine, op));
    int pending = 0;
    for (int round = 0; round < 60; ++round) {
      for (std::size_t i = 0; i < ops.size(); ++i) {
        Express outcome;
        ASSERT_EQ(run_blocking(*engine, ops[i], outcome), expected[i]) << ops[i].request.name << ", round " << round;
        pending += outcome == Express::Pending;
      }
      std::this_thread::sleep_for(10ms);
    }
    if (rank == 0) EXPECT_GE(pending, 1);  // the case this test is about did occur
  }, no_store());
}

}  // namespace
}  // namespace kolo::testing
