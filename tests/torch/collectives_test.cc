// kolo::torch tensor collectives across real processes, every supported dtype.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"
#include "kolo/torch/collectives.h"
#include "support.h"

namespace kolo_torch_testing {
namespace {

using kolo::AllreduceOptions;
using kolo::CollectiveOptions;
using kolo::DataType;
using kolo::InvalidArgumentError;
using kolo::MismatchError;
using kolo::ReduceOp;

namespace kt = kolo::torch;

const std::vector<c10::ScalarType> kAllDtypes = {at::kByte, at::kChar,     at::kShort, at::kInt,    at::kLong,
                                                 at::kHalf, at::kBFloat16, at::kFloat, at::kDouble, at::kBool};

std::string dtype_name(c10::ScalarType dtype) { return c10::toString(dtype); }

// Small integers every dtype represents exactly (bool: 0 or 1).
at::Tensor rank_values(c10::ScalarType dtype, int rank, std::vector<std::int64_t> shape) {
  std::int64_t count = 1;
  for (std::int64_t extent : shape) count *= extent;
  at::Tensor base = at::arange(count, at::kLong).reshape(shape).remainder(5);
  if (dtype == at::kBool) return (base + rank).remainder(2).to(at::kBool);
  return (base + rank).to(dtype);
}

TEST(TorchDtypeTest, MapsEverySupportedDtypeBothWays) {
  for (c10::ScalarType dtype : kAllDtypes) {
    EXPECT_EQ(kt::to_torch_dtype(kt::to_kolo_dtype(dtype)), dtype) << dtype_name(dtype);
  }
  EXPECT_EQ(kt::to_kolo_dtype(at::kHalf), DataType::Float16);
  EXPECT_EQ(kt::to_kolo_dtype(at::kBool), DataType::Bool);
  for (c10::ScalarType unsupported : {at::kComplexFloat, at::kComplexDouble, at::kQInt8, at::kComplexHalf}) {
    EXPECT_THROW(kt::to_kolo_dtype(unsupported), InvalidArgumentError) << dtype_name(unsupported);
  }
}

class TorchCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(TorchCollectivesTest, AllreduceSumEveryDtype) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    for (c10::ScalarType dtype : kAllDtypes) {
      at::Tensor expected = rank_values(dtype, 0, {3, 5}).to(at::kLong);
      for (int r = 1; r < size; ++r) expected = expected + rank_values(dtype, r, {3, 5}).to(at::kLong);
      if (dtype == at::kBool) expected = expected.gt(0).to(at::kLong);  // Sum on bool is OR

      AllreduceOptions options;
      options.op = ReduceOp::Sum;
      options.name = "sum." + dtype_name(dtype);
      at::Tensor input = rank_values(dtype, rank, {3, 5});
      at::Tensor before = input.clone();
      at::Tensor result = kt::allreduce(input, options);
      EXPECT_EQ(result.scalar_type(), dtype);
      EXPECT_TRUE(at::equal(result.to(at::kLong), expected)) << dtype_name(dtype);
      EXPECT_TRUE(at::equal(input, before)) << "out-of-place allreduce changed its input";

      options.name = "sum_." + dtype_name(dtype);
      kt::allreduce_(input, options);
      EXPECT_TRUE(at::equal(input.to(at::kLong), expected)) << dtype_name(dtype) << " in place";
    }
  });
}

TEST_P(TorchCollectivesTest, AllreduceAverageWithScaling) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    for (c10::ScalarType dtype : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
      AllreduceOptions options;
      options.name = "avg." + dtype_name(dtype);
      options.prescale = 0.5;
      options.postscale = 4.0;
      at::Tensor result = kt::allreduce(at::full({7}, rank * 2.0, dtype), options);
      const double mean = (size - 1) * 2.0 / 2.0;  // mean of 0, 2, 4, ...
      EXPECT_TRUE(at::allclose(result.to(at::kDouble), at::full({7}, mean * 2.0, at::kDouble)))
          << dtype_name(dtype) << ": " << result;
    }
  });
}

TEST_P(TorchCollectivesTest, NonContiguousInPlaceWritesBack) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    at::Tensor storage = at::arange(12, at::kDouble).reshape({3, 4}) * (rank + 1);
    at::Tensor transposed = storage.t();  // a view that is not contiguous
    ASSERT_FALSE(transposed.is_contiguous());
    AllreduceOptions options;
    options.op = ReduceOp::Sum;
    options.name = "noncontiguous";
    at::Tensor result = kt::allreduce_(transposed, options);
    const int size = kolo::size();
    at::Tensor expected = at::arange(12, at::kDouble).reshape({3, 4}) * (size * (size + 1) / 2);
    EXPECT_TRUE(result.is_same(transposed));
    EXPECT_TRUE(at::equal(storage, expected)) << storage;

    // A strided column (elements 3 apart) as allgather input.
    at::Tensor column = (at::arange(12, at::kDouble).reshape({4, 3}) + 100 * rank).select(1, 1);
    ASSERT_FALSE(column.is_contiguous());
    at::Tensor gathered = kt::allgather(column, {"gather.column"});
    ASSERT_EQ(gathered.size(0), 4 * size);
    for (int r = 0; r < size; ++r) {
      at::Tensor expected_column = at::tensor({1.0, 4.0, 7.0, 10.0}, at::kDouble) + 100 * r;
      EXPECT_TRUE(at::equal(gathered.narrow(0, 4 * r, 4), expected_column)) << gathered;
    }
  });
}

TEST_P(TorchCollectivesTest, AllgatherUnevenFirstDimensions) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    for (c10::ScalarType dtype : kAllDtypes) {
      CollectiveOptions options;
      options.name = "gather." + dtype_name(dtype);
      at::Tensor mine = rank_values(dtype, rank, {rank + 1, 2});
      at::Tensor all = kt::allgather(mine, options);
      ASSERT_EQ(all.scalar_type(), dtype);
      std::int64_t row = 0;
      for (int r = 0; r < kolo::size(); ++r) {
        EXPECT_TRUE(at::equal(all.narrow(0, row, r + 1), rank_values(dtype, r, {r + 1, 2})))
            << dtype_name(dtype) << " block of rank " << r;
        row += r + 1;
      }
      EXPECT_EQ(all.size(0), row);
    }
  });
}

// An output kolo allocated (a Buffer, shareable from 2 MiB here) carries its
// memory into the next collective, which may then work in place of it; a
// tensor libtorch allocated carries none.
TEST(TorchBufferTensorTest, ATensorOverAKoloBufferCarriesItsMemory) {
  kolo::testing::run_ranks(2, [](int rank) {
    ::setenv("KOLO_SHAREABLE_BUFFERS", "1", 1);
    kolo::init();
    at::Tensor mine = at::full({1 << 19}, static_cast<float>(rank + 1), at::kFloat);  // 2 MiB
    at::Tensor gathered = kt::allgather(mine, {"gather.buffer"});
    EXPECT_NE(kt::view_of(gathered).memory, nullptr);
    EXPECT_NE(kt::view_of(gathered.narrow(0, 1 << 19, 1 << 19)).memory, nullptr);
    EXPECT_EQ(kt::view_of(mine).memory, nullptr);
    kt::allreduce_(gathered, {.op = ReduceOp::Sum, .name = "reduce.buffer"});
    EXPECT_EQ(gathered[0].item<float>(), 2.0f);
    EXPECT_EQ(gathered[(1 << 20) - 1].item<float>(), 4.0f);
    kolo::shutdown();
  });
}

TEST_P(TorchCollectivesTest, BroadcastFromTheLastRank) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int root = kolo::size() - 1;
    for (c10::ScalarType dtype : kAllDtypes) {
      CollectiveOptions options;
      options.name = "bcast." + dtype_name(dtype);
      at::Tensor mine = rank_values(dtype, rank, {4, 3});
      at::Tensor copy = kt::broadcast(mine, root, options);
      EXPECT_TRUE(at::equal(copy, rank_values(dtype, root, {4, 3}))) << dtype_name(dtype);
      EXPECT_TRUE(at::equal(mine, rank_values(dtype, rank, {4, 3}))) << "out-of-place broadcast changed its input";
      options.name = "bcast_." + dtype_name(dtype);
      kt::broadcast_(mine, root, options);
      EXPECT_TRUE(at::equal(mine, rank_values(dtype, root, {4, 3}))) << dtype_name(dtype) << " in place";
    }
  });
}

TEST_P(TorchCollectivesTest, AlltoallWithSplits) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    // Rank r sends j + 1 rows to rank j, each row filled with 100 * r + j.
    std::vector<std::int64_t> splits;
    std::vector<at::Tensor> blocks;
    for (int j = 0; j < size; ++j) {
      splits.push_back(j + 1);
      blocks.push_back(at::full({j + 1, 2}, 100 * rank + j, at::kInt));
    }
    kt::TensorHandle handle = kt::alltoall_async(at::cat(blocks), splits, {"a2a"});
    at::Tensor received = handle.wait();
    ASSERT_EQ(received.size(0), size * (rank + 1));
    std::vector<std::int64_t> expected_splits(size, rank + 1);
    EXPECT_EQ(handle.received_splits(), expected_splits);
    for (int r = 0; r < size; ++r) {
      at::Tensor expected = at::full({rank + 1, 2}, 100 * r + rank, at::kInt);
      EXPECT_TRUE(at::equal(received.narrow(0, r * (rank + 1), rank + 1), expected)) << "rows from rank " << r;
    }
  });
}

TEST_P(TorchCollectivesTest, ReducescatterGivesEachRankItsBlock) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    at::Tensor input = at::arange(size * 2 * 3, at::kFloat).reshape({size * 2, 3}) + rank;
    at::Tensor mine = kt::reducescatter(input, ReduceOp::Sum, {"rs"});
    at::Tensor total = at::arange(size * 2 * 3, at::kFloat).reshape({size * 2, 3}) * size + size * (size - 1) / 2;
    EXPECT_TRUE(at::equal(mine, total.narrow(0, rank * 2, 2))) << mine;
  });
}

TEST_P(TorchCollectivesTest, AsyncHandlesAndDroppedHandles) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    std::vector<kt::TensorHandle> handles;
    for (int i = 0; i < 8; ++i) {
      AllreduceOptions options;
      options.op = ReduceOp::Sum;
      options.name = "async." + std::to_string(i);
      handles.push_back(kt::allreduce_async(at::full({100}, i + rank, at::kFloat), options));
    }
    for (int i = 7; i >= 0; --i) {
      at::Tensor result = handles[i].wait(std::chrono::seconds(30));
      const int size = kolo::size();
      EXPECT_EQ(result[0].item<float>(), static_cast<float>(i * size + size * (size - 1) / 2));
      EXPECT_TRUE(handles[i].poll());
      EXPECT_EQ(handles[i].name(), "async." + std::to_string(i));
    }
    // A handle dropped unwaited must not free memory under kolo: its destructor waits.
    {
      at::Tensor tensor = at::ones({1 << 16}, at::kFloat);
      kt::allreduce_async_(tensor, {ReduceOp::Sum, 1.0, 1.0, "dropped"});
    }
    // The job still works afterwards.
    EXPECT_EQ(kt::allreduce(at::ones({1}, at::kFloat), {ReduceOp::Sum, 1.0, 1.0, "after"}).item<float>(),
              static_cast<float>(kolo::size()));
  });
}

TEST_P(TorchCollectivesTest, UnsupportedTensorsAreClearErrors) {
  kolo::testing::run_ranks(GetParam(), [](int) {
    RankSession session;
    auto expect_error = [](const at::Tensor& tensor, const std::string& fragment) {
      try {
        kt::allreduce(tensor, {ReduceOp::Sum, 1.0, 1.0, "bad"});
        ADD_FAILURE() << "accepted a tensor that should be refused (" << fragment << ")";
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      }
    };
    expect_error(at::ones({2}, at::kComplexDouble), "ComplexDouble");
    expect_error(at::ones({2}, at::kComplexFloat), "ComplexFloat");
    expect_error(at::empty({2}, at::TensorOptions().device(c10::kMeta)), "CPU tensors only");
    expect_error(at::ones({2, 2}, at::kFloat).to_sparse(), "dense");
    expect_error(at::Tensor(), "undefined");
    EXPECT_THROW(kt::TensorHandle().wait(), InvalidArgumentError);
    // The refused tensors never reached the engine: collectives still work.
    EXPECT_EQ(kt::allreduce(at::ones({1}, at::kFloat), {ReduceOp::Sum, 1.0, 1.0, "good"}).item<float>(),
              static_cast<float>(kolo::size()));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TorchCollectivesTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace kolo_torch_testing
