// A float16 Average divides before it sums (as NCCL's average does), so that it
// holds wherever the mean fits: 60000 on every rank sums past float16's largest
// value (65504), but averages to 60000. Every route gives it: a tensor alone, a
// fused batch, the inputs carried in the agreement step, a reducescatter.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/half.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

std::vector<std::uint16_t> halves(std::size_t count, float value) {
  return std::vector<std::uint16_t>(count, float_to_fp16(value));
}

void expect_all(const std::uint16_t* data, std::size_t count, float value, const std::string& what) {
  for (std::size_t i = 0; i < count; ++i) {
    ASSERT_EQ(fp16_to_float(data[i]), value) << what << " element " << i;
  }
}

void average_of_large_halves(int rank) {
  kolo::init();
  const int n = kolo::size();
  for (std::size_t count : {std::size_t{4}, std::size_t{1} << 20}) {  // carried in the step, and not
    for (int call = 0; call < 2; ++call) {
      auto data = halves(count, 60000.0f);
      kolo::allreduce(Tensor{data.data(), DataType::Float16, {static_cast<std::int64_t>(count)}},
                      {.name = "big." + std::to_string(count)});
      expect_all(data.data(), count, 60000.0f, "allreduce of " + std::to_string(count));
    }
  }
  // A fused batch of two.
  auto a = halves(1000, 60000.0f), b = halves(3000, 30000.0f);
  Handle ha = kolo::allreduce_async(Tensor{a.data(), DataType::Float16, {1000}}, {.name = "fused.a"});
  Handle hb = kolo::allreduce_async(Tensor{b.data(), DataType::Float16, {3000}}, {.name = "fused.b"});
  ha.wait();
  hb.wait();
  expect_all(a.data(), a.size(), 60000.0f, "fused a");
  expect_all(b.data(), b.size(), 30000.0f, "fused b");
  // A postscale applies after the division.
  auto c = halves(8, 60000.0f);
  kolo::allreduce(Tensor{c.data(), DataType::Float16, {8}}, {.postscale = 0.5, .name = "postscaled"});
  expect_all(c.data(), c.size(), 30000.0f, "postscaled");
  auto rows = halves(static_cast<std::size_t>(2 * n), 60000.0f);
  Buffer mine = kolo::reducescatter(Tensor{rows.data(), DataType::Float16, {2 * n}}, ReduceOp::Average,
                                    {.name = "scatter"});
  expect_all(mine.as<std::uint16_t>(), 2, 60000.0f, "reducescatter");
  (void)rank;
  kolo::shutdown();
}

TEST(HalfAverage, LargeFloat16ValuesAverageWhereTheirSumWouldOverflow) { run_ranks(3, average_of_large_halves); }

TEST(HalfAverage, OverTcp) {
  run_ranks(2, average_of_large_halves, {.env = {{"KOLO_BACKEND", "tcp"}}});
}

}  // namespace
}  // namespace kolo::testing
