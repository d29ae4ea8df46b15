// DistributedSampler: shards are disjoint, cover the dataset, have equal sizes and
// are reshuffled every epoch. No communication: ranks are simulated by index.
#include <gtest/gtest.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <vector>

#include "harness/multiprocess.h"
#include "kolo/error.h"
#include "kolo/torch/sampler.h"
#include "support.h"

namespace kolo_torch_testing {
namespace {

using kolo::InvalidArgumentError;

using kolo::torch::DistributedSampler;
using kolo::torch::SamplerOptions;
using kolo::torch::shard_indices;

std::vector<std::vector<std::size_t>> all_shards(std::size_t n, int replicas, std::uint64_t epoch,
                                                 const SamplerOptions& options) {
  std::vector<std::vector<std::size_t>> shards;
  for (int r = 0; r < replicas; ++r) shards.push_back(shard_indices(n, replicas, r, epoch, options));
  return shards;
}

TEST(DistributedSamplerTest, ShardsAreDisjointCoveringAndEqual) {
  for (std::size_t n : {1u, 7u, 12u, 100u, 1001u}) {
    for (int replicas : {1, 2, 3, 4}) {
      if (n % replicas != 0) continue;  // padding is tested below
      auto shards = all_shards(n, replicas, 0, {});
      std::multiset<std::size_t> seen;
      for (const auto& shard : shards) {
        EXPECT_EQ(shard.size(), n / replicas);
        seen.insert(shard.begin(), shard.end());
      }
      std::multiset<std::size_t> every;
      for (std::size_t i = 0; i < n; ++i) every.insert(i);
      EXPECT_EQ(seen, every) << "n=" << n << " replicas=" << replicas;
    }
  }
}

TEST(DistributedSamplerTest, PadsByWrappingAroundSoCountsAreEqual) {
  // 10 samples over 4 ranks: 12 positions, the first 2 of the permutation repeat.
  auto shards = all_shards(10, 4, 3, {});
  std::multiset<std::size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 3u);
    seen.insert(shard.begin(), shard.end());
  }
  std::set<std::size_t> distinct(seen.begin(), seen.end());
  EXPECT_EQ(distinct.size(), 10u) << "every sample is used";
  EXPECT_EQ(seen.size(), 12u);

  // More ranks than samples: still one each, wrapping as often as needed.
  auto tiny = all_shards(2, 5, 0, {.shuffle = false});
  for (int r = 0; r < 5; ++r) EXPECT_EQ(tiny[r], std::vector<std::size_t>{static_cast<std::size_t>(r % 2)});
}

TEST(DistributedSamplerTest, DropLastTruncates) {
  auto shards = all_shards(10, 4, 0, {.shuffle = true, .seed = 1, .drop_last = true});
  std::set<std::size_t> seen;
  for (const auto& shard : shards) {
    EXPECT_EQ(shard.size(), 2u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 8u) << "no index twice";
}

TEST(DistributedSamplerTest, WithoutShuffleRankTakesEveryNth) {
  EXPECT_EQ(shard_indices(7, 3, 1, 5, {.shuffle = false}), (std::vector<std::size_t>{1, 4, 0}));
}

TEST(DistributedSamplerTest, ReshuffledPerEpochAndReproducible) {
  const SamplerOptions options{.shuffle = true, .seed = 42};
  auto epoch0 = shard_indices(1000, 2, 0, 0, options);
  auto epoch1 = shard_indices(1000, 2, 0, 1, options);
  EXPECT_NE(epoch0, epoch1);
  EXPECT_EQ(epoch0, shard_indices(1000, 2, 0, 0, options)) << "same seed and epoch, same shard";
  EXPECT_NE(epoch0, shard_indices(1000, 2, 0, 0, {.shuffle = true, .seed = 43}));
  std::vector<std::size_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, epoch0) << "a shuffled shard is not in order";
}

TEST(DistributedSamplerTest, SamplerBatchesTheShard) {
  DistributedSampler sampler(10, 2, 1, {.shuffle = true, .seed = 5});
  EXPECT_EQ(sampler.num_samples(), 5u);
  std::vector<std::size_t> batched;
  while (auto batch = sampler.next(2)) {
    EXPECT_LE(batch->size(), 2u);
    batched.insert(batched.end(), batch->begin(), batch->end());
  }
  EXPECT_EQ(batched, sampler.indices());
  sampler.reset();
  EXPECT_EQ(sampler.next(100)->size(), 5u);

  auto before = sampler.indices();
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.epoch(), 1u);
  EXPECT_NE(sampler.indices(), before);
  EXPECT_EQ(sampler.indices(), shard_indices(10, 2, 1, 1, {.shuffle = true, .seed = 5}));

  sampler.reset(20);
  EXPECT_EQ(sampler.num_samples(), 10u);
}

TEST(DistributedSamplerTest, InvalidPlacesAreRejected) {
  EXPECT_THROW(shard_indices(10, 0, 0, 0), InvalidArgumentError);
  EXPECT_THROW(shard_indices(10, 2, 2, 0), InvalidArgumentError);
  EXPECT_THROW(shard_indices(10, 2, -1, 0), InvalidArgumentError);
  EXPECT_THROW(DistributedSampler(10, 3, 5), InvalidArgumentError);
  EXPECT_TRUE(shard_indices(0, 2, 1, 0).empty());
}

TEST(DistributedSamplerTest, SaveAndLoadKeepEpochAndPosition) {
  // Serialization runs libtorch's JIT machinery: keep it out of the parent process.
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    DistributedSampler sampler(50, {.seed = 9});
    EXPECT_EQ(sampler.num_samples(), 25u);
    sampler.set_epoch(4);
    sampler.next(10);
    ::torch::serialize::OutputArchive out;
    sampler.save(out);
    std::ostringstream bytes;
    out.save_to(bytes);

    DistributedSampler restored(50, {.seed = 9});
    ::torch::serialize::InputArchive in;
    std::istringstream stream(bytes.str());
    in.load_from(stream);
    restored.load(in);
    EXPECT_EQ(restored.epoch(), 4u);
    EXPECT_EQ(restored.next(100)->size(), 15u);
    EXPECT_EQ(restored.indices(), shard_indices(50, 2, rank, 4, {.seed = 9}));
  });
}

}  // namespace
}  // namespace kolo_torch_testing
