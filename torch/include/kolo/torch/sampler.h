// Splitting a dataset between ranks, one shard each, reshuffled every epoch.
#pragma once

#include <torch/data/samplers/base.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo::torch {

struct SamplerOptions {
  // Permute the dataset each epoch, identically on every rank.
  bool shuffle = true;
  // Ranks must agree on the seed; the permutation of epoch e is seeded by seed + e.
  std::uint64_t seed = 0;
  // Drop the tail that does not divide evenly between ranks instead of padding by
  // repeating the first indices (PyTorch's DistributedSampler semantics).
  bool drop_last = false;
};

// Rank `rank`'s indices for one epoch. Every rank gets the same count: the
// (permuted) index list is padded by wrapping around to a multiple of
// `num_replicas` (or truncated with drop_last), and rank r takes positions r,
// r + num_replicas, ... Throws InvalidArgumentError on a bad rank or replica count.
std::vector<std::size_t> shard_indices(std::size_t dataset_size, int num_replicas, int rank, std::uint64_t epoch,
                                       const SamplerOptions& options = {});

// A libtorch sampler (usable with torch::data::make_data_loader) that yields this
// rank's shard. Call set_epoch() at the start of every epoch to reshuffle.
class DistributedSampler : public ::torch::data::samplers::Sampler<std::vector<std::size_t>> {
 public:
  // Shards among all ranks of the job (kolo::size(), kolo::rank()); needs kolo::init().
  explicit DistributedSampler(std::size_t dataset_size, SamplerOptions options = {});
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank, SamplerOptions options = {});

  // Selects the epoch's permutation and rewinds.
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, and how many they are.
  const std::vector<std::size_t>& indices() const { return indices_; }
  std::size_t num_samples() const { return indices_.size(); }

  // Sampler interface: reset() rewinds (and resizes the dataset when given a size),
  // next() hands out up to batch_size indices, save()/load() keep epoch and position.
  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  void save(::torch::serialize::OutputArchive& archive) const override;
  void load(::torch::serialize::InputArchive& archive) override;

 private:
  void rebuild();

  std::size_t dataset_size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  std::uint64_t epoch_ = 0;
  std::vector<std::size_t> indices_;
  std::size_t cursor_ = 0;
};

}  // namespace kolo::torch
