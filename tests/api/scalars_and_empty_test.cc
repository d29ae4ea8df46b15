// Scalars (no dimension) and empty tensors through the public API, each call
// made again under its name so that the cached and carried (eager) routes run
// too. torch keeps an optimizer's step as a scalar, and broadcasting a state
// twice is an ordinary thing to do.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

void scalars_and_empty_tensors(int rank) {
  kolo::init();
  const int n = kolo::size();
  for (int call = 0; call < 3; ++call) {
    const std::string round = " (call " + std::to_string(call) + ")";
    double step = rank + call;
    kolo::broadcast(Tensor{&step, DataType::Float64, {}}, 0, {.name = "step"});
    EXPECT_EQ(step, call) << round;
    std::int64_t count = rank;
    kolo::allreduce(Tensor{&count, DataType::Int64, {}}, {.op = ReduceOp::Sum, .name = "count"});
    EXPECT_EQ(count, n * (n - 1) / 2) << round;

    std::vector<float> none;
    kolo::allreduce(Tensor{none.data(), DataType::Float32, {0}}, {.name = "empty.allreduce"});
    kolo::broadcast(Tensor{none.data(), DataType::Float32, {0, 3}}, n - 1, {.name = "empty.broadcast"});
    Buffer gathered = kolo::allgather(Tensor{none.data(), DataType::Float32, {0, 3}}, {.name = "empty.gather"});
    EXPECT_EQ(gathered.shape(), (Shape{0, 3})) << round;
    Buffer scattered =
        kolo::reducescatter(Tensor{none.data(), DataType::Float32, {0, 2}}, ReduceOp::Sum, {.name = "empty.rs"});
    EXPECT_EQ(scattered.shape(), (Shape{0, 2})) << round;
    Buffer exchanged = kolo::alltoall(Tensor{none.data(), DataType::Float32, {0, 2}},
                                      std::vector<std::int64_t>(static_cast<std::size_t>(n), 0),
                                      {.name = "empty.alltoall"});
    EXPECT_EQ(exchanged.shape(), (Shape{0, 2})) << round;
  }
  // The engine went on: an ordinary allreduce after all of them.
  float one = 1.0f;
  kolo::allreduce(make_tensor(&one, 1), {.op = ReduceOp::Sum, .name = "after"});
  EXPECT_EQ(one, static_cast<float>(n));
  kolo::shutdown();
}

TEST(ScalarsAndEmpty, EveryCollectiveTwiceUnderItsName) { run_ranks(2, scalars_and_empty_tensors); }

TEST(ScalarsAndEmpty, EveryCollectiveTwiceWithoutEagerSteps) {
  run_ranks(3, scalars_and_empty_tensors, {.env = {{"KOLO_EAGER_BYTES", "0"}}});
}

}  // namespace
}  // namespace kolo::testing
