// Every route through the engine gives the same results, bit for bit: the
// coordinator's round, the background thread's cycle, a cycle the waiting caller
// drives, and the express path of a blocking call (its own cycle); with the
// operation carried in the agreement step or reduced by a collective of its own;
// with the timeline on or off (it records, it does not choose the route).
// Engines run on real shared-memory communicators in real processes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "engine_routes.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

class EngineRoutes : public ::testing::TestWithParam<std::tuple<Route, bool>> {
 protected:
  static Route route() { return std::get<0>(GetParam()); }
  static bool timeline() { return std::get<1>(GetParam()); }
};

// The allreduces of a test: Sum, Average, scale factors, in place, empty, and
// one too large for the agreement step of the engines below (16 and 64 bytes).
std::vector<Call> allreduces_of(int rank) {
  const std::vector<float> in = {1.0f / (rank + 3), static_cast<float>(rank) - 0.7f, 1e-3f * rank};
  std::vector<Call> calls = {{"one", {1.0f + rank}, {0.0f}},
                             {"avg", in, std::vector<float>(3), ReduceOp::Average},
                             {"scaled", in, std::vector<float>(3), ReduceOp::Sum, 0.5, 3.0},
                             {"in-place", in, {}, ReduceOp::Average, 1.0, 4.0, true},
                             {"empty", {}, {}},
                             {"large", std::vector<float>(40, 0.1f * rank), std::vector<float>(40), ReduceOp::Average,
                              2.0, 0.5}};
  return calls;
}

// Rank 0 writes the timeline: the file names every operation that ran.
void expect_traced(const std::string& path, const std::vector<std::string>& names) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  for (const auto& name : names)
    EXPECT_NE(text.str().find("\"" + name + "\""), std::string::npos) << name << " is not in " << path;
  std::filesystem::remove(path);
}

// The first result of each name is the coordinator's (the cache does not hold
// it yet); every later one, by the route under test, must equal it, on engines
// with and without eager bytes alike.
TEST_P(EngineRoutes, AllreducesGiveTheSameBits) {
  run_ranks(3, [](int rank) {
    std::vector<std::vector<float>> expected;
    for (const std::size_t eager : {std::size_t{0}, std::size_t{16}, std::size_t{64}}) {
      auto [engine, comm] = make_counted_engine(rank, eager, "-" + std::to_string(eager));
      const std::string trace = "/tmp/kolo-routes-" + std::string(std::getenv("KOLO_JOB_ID")) + ".json";
      if (timeline()) engine->set_timeline(trace);
      std::vector<Call> calls = allreduces_of(rank);
      std::vector<std::string> names;
      for (std::size_t k = 0; k < calls.size(); ++k) {
        Call& call = calls[k];
        const std::vector<float> input = call.in;
        ordinary(*engine, call);
        if (expected.size() == k) expected.push_back(call.result());
        EXPECT_EQ(call.result(), expected[k]) << call.name << ", eager bytes " << eager;
        for (int round = 0; round < 3; ++round) {
          call.in = input;
          std::fill(call.out.begin(), call.out.end(), 0.0f);
          run_allreduce(route(), *engine, call, round);
          EXPECT_EQ(call.result(), expected[k]) << call.name << ", eager bytes " << eager << ", round " << round;
          if (!call.in_place) EXPECT_EQ(call.in, input) << call.name << ": an out-of-place input was written";
        }
        names.push_back(call.name);
      }
      if (timeline()) {
        engine->set_timeline("");
        if (rank == 0) expect_traced(trace, names);
      }
    }
  }, no_store());
}

TEST_P(EngineRoutes, OtherCollectivesGiveTheSameBits) {
  run_ranks(3, [](int rank) {
    std::vector<std::vector<std::byte>> expected;
    // 40: the alltoall's inputs (36 to 60 bytes) fit on some ranks only.
    for (const std::size_t eager : {std::size_t{0}, std::size_t{40}, std::size_t{1024}}) {
      auto [engine, comm] = make_counted_engine(rank, eager, "-" + std::to_string(eager));
      const std::string trace = "/tmp/kolo-routes-ops-" + std::string(std::getenv("KOLO_JOB_ID")) + ".json";
      if (timeline()) engine->set_timeline(trace);
      auto ops = ops_of(rank, 3);
      std::vector<std::string> names;
      for (std::size_t k = 0; k < ops.size(); ++k) {
        Op& op = ops[k];
        const std::vector<float> input = op.data;
        const std::vector<std::byte> first = run_ordinary(*engine, op);
        if (expected.size() == k) expected.push_back(first);
        EXPECT_EQ(first, expected[k]) << op.request.name << ", eager bytes " << eager;
        for (int round = 0; round < 3; ++round) {
          op.data = input;
          EXPECT_EQ(run_op(route(), *engine, op, round), expected[k])
              << op.request.name << ", eager bytes " << eager << ", round " << round;
        }
        names.push_back(op.request.name);
      }
      if (timeline()) {
        engine->set_timeline("");
        if (rank == 0) expect_traced(trace, names);
      }
    }
  }, no_store());
}

INSTANTIATE_TEST_SUITE_P(Routes, EngineRoutes,
                         ::testing::Combine(::testing::Values(Route::Coordinated, Route::Background, Route::Driven,
                                                              Route::Express),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<Route, bool>>& info) {
                           return std::string(to_string(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "WithTimeline" : "");
                         });

}  // namespace
}  // namespace kolo::testing
