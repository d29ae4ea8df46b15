// The routes an operation takes through the engine, for the engine's tests:
// the same allreduce, allgather, broadcast, alltoall or reducescatter run by the
// coordinator's round, by a cycle of the background thread, by a cycle its
// waiting caller drives, or by the caller's own cycle (the express path of a
// blocking call), on engines of tests/harness/counted_engine.h.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "harness/counted_engine.h"

namespace kolo::testing {

using Express = engine::Engine::Express;

enum class Route {
  Coordinated,  // a name the cache does not hold: the coordinator's round, every time
  Background,   // submitted asynchronously, run by the background thread's cycle
  Driven,       // submitted, then the waiting caller drives the cycles (Engine::drive)
  Express,      // a blocking call's own cycle (Engine::express), which must finish it
};

inline const char* to_string(Route route) {
  switch (route) {
    case Route::Coordinated: return "Coordinated";
    case Route::Background: return "Background";
    case Route::Driven: return "Driven";
    case Route::Express: return "Express";
  }
  return "?";
}

// An allreduce as a blocking call gives it to Engine::express.
struct Call {
  std::string name;
  std::vector<float> in, out;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0, postscale = 1.0;
  bool in_place = false;  // the result replaces `in` (then `out` is unused)
  Shape shape() const { return {static_cast<std::int64_t>(in.size())}; }
  std::vector<float>& result() { return in_place ? in : out; }
};

// Runs `call` through the express path; a Pending operation is waited for.
// NotApplicable did nothing, so it is tried once more a moment later: a background
// thread that started while the test submitted its first operation may have run
// that cycle and still hold it (the express path never waits for the cycle).
inline Express express(engine::Engine& engine, Call& call) {
  using namespace std::chrono_literals;
  const Shape shape = call.shape();
  const engine::AllreduceCall view{call.name,  call.in.data(), call.result().data(), DataType::Float32,
                                   shape,      call.op,        call.prescale,        call.postscale};
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
inline void ordinary(engine::Engine& engine, Call& call) {
  allreduce(engine, call.name, call.in, call.result(), call.op, call.prescale, call.postscale);
}

// Submits `entries` for the background thread to run and waits without driving.
inline void run_in_background(engine::Engine& engine, std::vector<engine::Entry>& entries) {
  auto state = entries.front().state;
  engine.submit(entries, /*wake=*/true);
  state->wait();
}

// Runs `call` by `route`; `round` tells the coordinated route's calls apart.
inline void run_allreduce(Route route, engine::Engine& engine, Call& call, int round) {
  switch (route) {
    case Route::Coordinated: {
      Call fresh = call;
      fresh.name += "#" + std::to_string(round);
      ordinary(engine, fresh);
      call.result() = fresh.result();
      return;
    }
    case Route::Background: {
      std::vector<engine::Entry> entries;
      entries.push_back(engine::Entry{
          allreduce_request(call.name, call.in.size(), call.op, call.prescale, call.postscale), call.in.data(),
          call.result().data(), std::make_shared<detail::OpState>(call.name)});
      run_in_background(engine, entries);
      return;
    }
    case Route::Driven: ordinary(engine, call); return;
    case Route::Express: ASSERT_EQ(express(engine, call), Express::Done) << call.name << ", round " << round; return;
  }
}

// One operation of another kind: its request and the memory it reads and writes.
struct Op {
  engine::Request request;
  std::vector<float> data;  // input; broadcast's buffer

  engine::Entry entry() {
    auto state = std::make_shared<detail::OpState>(request.name);
    return engine::Entry{request, data.data(), data.data(), std::move(state)};
  }
};

// Every kind, with shapes that differ between the ranks where the operation allows.
inline std::vector<Op> ops_of(int rank, int size) {
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
inline std::vector<std::byte> result_of(const Op& op, const std::shared_ptr<detail::OpState>& state) {
  if (op.request.op == engine::OpType::Broadcast) {
    const auto* p = reinterpret_cast<const std::byte*>(op.data.data());
    return {p, p + op.data.size() * sizeof(float)};
  }
  const auto* p = static_cast<const std::byte*>(state->output.data());
  return {p, p + state->output.nbytes()};
}

inline std::vector<std::byte> run_ordinary(engine::Engine& engine, Op& op) {
  std::vector<engine::Entry> entries{op.entry()};
  auto state = entries.front().state;
  engine.submit(entries, false);
  wait(engine, state);
  return result_of(op, state);
}

// Runs `op` through the express path; NotApplicable is tried once more a moment
// later (a background thread that started during the test's first operation may
// still hold that cycle: express never waits for it).
inline Express run_express(engine::Engine& engine, Op& op, std::vector<std::byte>& result) {
  using namespace std::chrono_literals;
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

// Runs `op` by `route` and returns what it produced.
inline std::vector<std::byte> run_op(Route route, engine::Engine& engine, Op& op, int round) {
  switch (route) {
    case Route::Coordinated: {
      Op fresh = op;
      fresh.request.name += "#" + std::to_string(round);
      std::vector<std::byte> result = run_ordinary(engine, fresh);
      op.data = fresh.data;
      return result;
    }
    case Route::Background: {
      std::vector<engine::Entry> entries{op.entry()};
      auto state = entries.front().state;
      run_in_background(engine, entries);
      return result_of(op, state);
    }
    case Route::Driven: return run_ordinary(engine, op);
    case Route::Express: {
      std::vector<std::byte> result;
      EXPECT_EQ(run_express(engine, op, result), Express::Done) << op.request.name << ", round " << round;
      return result;
    }
  }
  return {};
}

}  // namespace kolo::testing
