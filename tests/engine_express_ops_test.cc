// The express path of a blocking allgather, broadcast, alltoall and reducescatter
// (Engine::express(Entry&)): once cached, the operation takes its agreement step
// on the calling thread, carrying the inputs when they fit, and otherwise one
// collective after it, with the results of the ordinary path; what the cache does not hold is left to the ordinary path, and a
// step that does not finish the operation hands it over as an ordinary one, or,
// when every rank carried it, finishes it in the rest of the cycle.
// Engines run on real shared-memory communicators in real processes; a forwarding
// communicator counts their collectives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "harness/counted_engine.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Express = engine::Engine::Express;

// One operation of a test: its request and the memory it reads and writes.
struct Op {
  engine::Request request;
  std::vector<float> data;  // input; broadcast's buffer

  engine::Entry entry() {
    auto state = std::make_shared<detail::OpState>(request.name);
    return engine::Entry{request, data.data(), data.data(), std::move(state)};
  }
};

// Every kind, with shapes that differ between the ranks where the operation allows.
std::vector<Op> ops_of(int rank, int size) {
  auto make = [](const std::string& name, engine::OpType type, std::int64_t rows, float seed) {
    Op op;
    op.request.name = name;
    op.request.op = type;
    op.request.dtype = DataType::Float32;
    op.request.shape = {rows, 3};
    for (std::int64_t i = 0; i < rows * 3; ++i) op.data.push_back(seed + 0.25f * static_cast<float>(i));
    return op;
  };
  std::vector<Op> ops;
  ops.push_back(make("gather", engine::OpType::Allgather, rank + 1, 10.0f * rank));
  Op bcast = make("bcast", engine::OpType::Broadcast, 2, 100.0f + rank);
  bcast.request.root = size - 1;
  ops.push_back(bcast);
  Op a2a = make("a2a", engine::OpType::Alltoall, size + rank, 1000.0f * rank);
  for (int r = 0; r < size; ++r) a2a.request.splits.push_back(r == rank ? 1 + rank : 1);
  // The splits must sum to the rows: give the remainder to the last rank.
  std::int64_t given = 0;
  for (auto s : a2a.request.splits) given += s;
  a2a.request.splits.back() += a2a.request.shape[0] - given;
  ops.push_back(a2a);
  Op rs = make("rs", engine::OpType::Reducescatter, 2 * size + 1, 7.0f * rank);
  rs.request.reduce_op = ReduceOp::Average;
  ops.push_back(rs);
  return ops;
}

// What an operation produced: its output Buffer's bytes, or broadcast's buffer.
std::vector<std::byte> result_of(const Op& op, const std::shared_ptr<detail::OpState>& state) {
  if (op.request.op == engine::OpType::Broadcast) {
    const auto* p = reinterpret_cast<const std::byte*>(op.data.data());
    return {p, p + op.data.size() * sizeof(float)};
  }
  const auto* p = static_cast<const std::byte*>(state->output.data());
  return {p, p + state->output.nbytes()};
}

std::vector<std::byte> run_ordinary(engine::Engine& engine, Op& op) {
  std::vector<engine::Entry> entries{op.entry()};
  auto state = entries.front().state;
  engine.submit(entries, false);
  wait(engine, state);
  return result_of(op, state);
}

// Runs `op` through the express path; NotApplicable is tried once more a moment
// later (a background thread that started during the test's first operation may
// still hold that cycle: express never waits for it).
Express run_express(engine::Engine& engine, Op& op, std::vector<std::byte>& result) {
  engine::Entry entry = op.entry();
  auto state = entry.state;
  Express outcome = engine.express(entry);
  if (outcome == Express::NotApplicable) {
    std::this_thread::sleep_for(20ms);
    outcome = engine.express(entry);
  }
  if (outcome == Express::NotApplicable) return outcome;
  wait(engine, state);
  result = result_of(op, state);
  return outcome;
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
// what it is, with the ordinary path's results. (It once took every carried
// operation for an allreduce there, and crashed.)
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
