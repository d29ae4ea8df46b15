// Every collective x every dtype x sizes x job sizes 1-4, checked on every rank
// against a local reference (exact for integers) and bitwise equal across ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/agreement.h"
#include "harness/multiprocess.h"
#include "harness/values.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

const DataType kAllTypes[] = {DataType::UInt8,    DataType::Int8,    DataType::Int32,
                              DataType::Int64,    DataType::Float16, DataType::BFloat16,
                              DataType::Float32,  DataType::Float64, DataType::Bool};
const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

// The fusion threshold is lowered so that the larger sizes exceed it.
constexpr std::int64_t kFusionThreshold = 64 * 1024;

std::vector<std::int64_t> sizes_for(DataType dtype) {
  const std::int64_t mib = (1 << 20) / static_cast<std::int64_t>(element_size(dtype));
  const std::int64_t above_fusion = kFusionThreshold / static_cast<std::int64_t>(element_size(dtype)) * 3 + 5;
  return {0, 1, 7919, mib, above_fusion};
}

std::string label(const char* op, DataType dtype, std::int64_t count) {
  return std::string(op) + "." + to_string(dtype) + "." + std::to_string(count);
}

void check_reduction(const void* data, std::int64_t count, DataType dtype, ReduceOp op, int salt,
                     const std::string& what) {
  const int n = kolo::size();
  int reported = 0;
  for (std::int64_t i = 0; i < count && reported < 5; ++i) {
    double want = expected_reduction(n, i, dtype, op, salt);
    double got = read_element(data, dtype, i);
    if (std::fabs(got - want) > tolerance(dtype, want)) {
      ADD_FAILURE() << what << " (" << to_string(op) << ") element " << i << ": got " << got << ", want " << want;
      ++reported;
    }
  }
  expect_bitwise_equal_everywhere(data, static_cast<std::size_t>(count) * element_size(dtype), what);
}

void sweep_allreduce(DataType dtype, std::int64_t count, int salt) {
  for (ReduceOp op : kAllOps) {
    if (dtype == DataType::Bool && op == ReduceOp::Average) continue;  // rejected, tested elsewhere
    auto what = label("allreduce", dtype, count) + "." + to_string(op);
    auto data = make_values(kolo::rank(), count, dtype, salt);
    kolo::allreduce(Tensor{data.data(), dtype, {count}}, {.op = op, .name = what});
    check_reduction(data.data(), count, dtype, op, salt, what);
  }
}

void sweep_allgather(DataType dtype, std::int64_t count, int salt) {
  // Rank r contributes count + r rows of 2 elements: first dimensions differ.
  const int me = kolo::rank();
  auto what = label("allgather", dtype, count);
  auto mine = make_values(me, (count + me) * 2, dtype, salt);
  Buffer out = kolo::allgather(Tensor{mine.data(), dtype, {count + me, 2}}, {.name = what});
  std::int64_t rows = 0;
  for (int r = 0; r < kolo::size(); ++r) rows += count + r;
  ASSERT_EQ(out.shape(), (Shape{rows, 2})) << what;
  std::int64_t offset = 0;
  for (int r = 0; r < kolo::size(); ++r) {
    const std::int64_t elements = (count + r) * 2;
    auto theirs = make_values(r, elements, dtype, salt);
    // memcmp of no bytes still needs valid pointers, and empty buffers have none.
    if (!theirs.empty()) {
      ASSERT_EQ(0, std::memcmp(static_cast<const std::byte*>(out.data()) + offset * element_size(dtype), theirs.data(),
                               theirs.size()))
          << what << ": the rows from rank " << r << " differ";
    }
    offset += elements;
  }
  expect_bitwise_equal_everywhere(out.data(), out.nbytes(), what);
}

void sweep_broadcast(DataType dtype, std::int64_t count, int salt) {
  const int root = kolo::size() - 1;
  auto what = label("broadcast", dtype, count);
  auto data = make_values(kolo::rank(), count, dtype, salt);
  kolo::broadcast(Tensor{data.data(), dtype, {count}}, root, {.name = what});
  EXPECT_EQ(data, make_values(root, count, dtype, salt)) << what;
}

void sweep_alltoall(DataType dtype, std::int64_t count, int salt) {
  // Rank s sends (count % 5) + s + d rows to rank d: uneven, rank-dependent splits.
  const int n = kolo::size();
  const int me = kolo::rank();
  auto rows_from = [&](int s, int d) { return count % 5 + s + d; };
  std::vector<std::int64_t> splits;
  std::int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    splits.push_back(rows_from(me, d));
    total += splits.back();
  }
  auto what = label("alltoall", dtype, count);
  auto mine = make_values(me, total, dtype, salt);
  Handle h = kolo::alltoall_async(Tensor{mine.data(), dtype, {total}}, splits, {.name = what});
  Buffer out = h.take_output();
  std::int64_t offset = 0;
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ(h.received_splits()[s], rows_from(s, me)) << what;
    // Rank s's rows for me start after its rows for ranks before me.
    std::int64_t start = 0;
    for (int d = 0; d < me; ++d) start += rows_from(s, d);
    auto theirs = make_values(s, start + rows_from(s, me), dtype, salt);
    for (std::int64_t i = 0; i < rows_from(s, me); ++i)
      ASSERT_EQ(read_element(out.data(), dtype, offset + i), read_element(theirs.data(), dtype, start + i)) << what;
    offset += rows_from(s, me);
  }
  EXPECT_EQ(out.shape()[0], offset);
}

void sweep_reducescatter(DataType dtype, std::int64_t count, int salt) {
  const int n = kolo::size();
  const int me = kolo::rank();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    if (dtype == DataType::Bool && op == ReduceOp::Average) continue;
    auto what = label("reducescatter", dtype, count) + "." + to_string(op);
    auto data = make_values(me, count, dtype, salt);
    Buffer out = kolo::reducescatter(Tensor{data.data(), dtype, {count}}, op, {.name = what});
    std::int64_t begin = 0;
    for (int r = 0; r < me; ++r) begin += count / n + (r < count % n ? 1 : 0);
    std::int64_t mine = count / n + (me < count % n ? 1 : 0);
    ASSERT_EQ(out.shape(), (Shape{mine})) << what;
    for (std::int64_t i = 0; i < mine; ++i) {
      double want = expected_reduction(n, begin + i, dtype, op, salt);
      double got = read_element(out.data(), dtype, i);
      ASSERT_LE(std::fabs(got - want), tolerance(dtype, want)) << what << " element " << i;
    }
  }
}

class CollectivesSweep : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesSweep, EveryOpEveryDtypeEverySize) {
  SpawnOptions options;
  options.env["KOLO_FUSION_THRESHOLD"] = std::to_string(kFusionThreshold);
  options.timeout = std::chrono::seconds(300);
  run_ranks(
      GetParam(),
      [](int) {
        kolo::init();
        int salt = 0;
        for (DataType dtype : kAllTypes) {
          for (std::int64_t count : sizes_for(dtype)) {
            ++salt;
            sweep_allreduce(dtype, count, salt);
            sweep_allgather(dtype, count, salt);
            sweep_broadcast(dtype, count, salt);
            sweep_alltoall(dtype, count, salt);
            sweep_reducescatter(dtype, count, salt);
          }
        }
        kolo::shutdown();
      },
      options);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesSweep, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace kolo::testing
