// ElasticSampler: an epoch's fixed order, the indices it has processed, and the
// split of the rest over the ranks.
#include <algorithm>
#include <string>

#include "kolo/error.h"
#include "kolo/runtime.h"
#include "kolo/torch/elastic.h"
#include "kolo/torch/sampler.h"

namespace kolo::torch::elastic {
namespace {

void check_place(int num_replicas, int rank) {
  if (num_replicas < 1) {
    throw InvalidArgumentError("ElasticSampler: num_replicas must be at least 1, got " +
                               std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw InvalidArgumentError("ElasticSampler: rank " + std::to_string(rank) + " is outside [0, " +
                               std::to_string(num_replicas) + ")");
  }
}

void check_batch_size(std::size_t batch_size) {
  if (batch_size == 0) throw InvalidArgumentError("ElasticSampler: batch_size must be at least 1");
}

}  // namespace

ElasticSampler::ElasticSampler(std::size_t dataset_size, ElasticSamplerOptions options)
    : ElasticSampler(dataset_size, kolo::size(), kolo::rank(), options) {}

ElasticSampler::ElasticSampler(std::size_t dataset_size, int num_replicas, int rank, ElasticSamplerOptions options)
    : options_(options), processed_(dataset_size, 0) {
  split(num_replicas, rank);
}

void ElasticSampler::set_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  std::fill(processed_.begin(), processed_.end(), 0);
  num_processed_ = 0;
  split(num_replicas_, rank_);
}

std::size_t ElasticSampler::num_batches(std::size_t batch_size) const {
  check_batch_size(batch_size);
  return (indices_.size() + batch_size - 1) / batch_size;
}

std::vector<std::size_t> ElasticSampler::batch(std::size_t batch_index, std::size_t batch_size) const {
  if (batch_index >= num_batches(batch_size)) return {};
  const std::size_t start = batch_index * batch_size;
  const std::size_t end = std::min(indices_.size(), start + batch_size);
  return {indices_.begin() + static_cast<std::ptrdiff_t>(start), indices_.begin() + static_cast<std::ptrdiff_t>(end)};
}

void ElasticSampler::record_batch(std::size_t batch_index, std::size_t batch_size) {
  record_indices(batch(batch_index, batch_size));
}

void ElasticSampler::record_indices(const std::vector<std::size_t>& indices) {
  // Check all first, so that a bad index records nothing.
  for (std::size_t index : indices) {
    if (index >= processed_.size()) {
      throw InvalidArgumentError("ElasticSampler: index " + std::to_string(index) + " is past the dataset (" +
                                 std::to_string(processed_.size()) + " samples)");
    }
  }
  for (std::size_t index : indices) {
    if (!processed_[index]) ++num_processed_;
    processed_[index] = 1;
  }
}

void ElasticSampler::reset() { split(kolo::size(), kolo::rank()); }

void ElasticSampler::split(int num_replicas, int rank) {
  check_place(num_replicas, rank);
  num_replicas_ = num_replicas;
  rank_ = rank;
  // The epoch's one order, whatever the resets: DistributedSampler's permutation
  // (the whole of it is one replica's shard), processed indices left out.
  const std::vector<std::size_t> order =
      shard_indices(processed_.size(), 1, 0, epoch_, {.shuffle = options_.shuffle, .seed = options_.seed});
  std::vector<std::size_t> remaining;
  remaining.reserve(processed_.size() - num_processed_);
  for (std::size_t index : order) {
    if (!processed_[index]) remaining.push_back(index);
  }
  num_remaining_ = remaining.size();
  indices_.clear();
  if (remaining.empty()) return;
  // Equal shares: the remaining list repeats from its start up to a multiple of
  // the ranks, and rank r takes positions r, r + num_replicas, ...
  const auto replicas = static_cast<std::size_t>(num_replicas);
  const std::size_t per_rank = (remaining.size() + replicas - 1) / replicas;
  indices_.reserve(per_rank);
  for (std::size_t k = 0; k < per_rank; ++k) {
    indices_.push_back(remaining[(k * replicas + static_cast<std::size_t>(rank)) % remaining.size()]);
  }
}

void ElasticSampler::record_processed(const std::vector<std::uint8_t>& mask) {
  check_mask(mask, "record_processed");
  for (std::size_t i = 0; i < mask.size(); ++i) {
    if (mask[i] && !processed_[i]) {
      processed_[i] = 1;
      ++num_processed_;
    }
  }
}

void ElasticSampler::load(std::uint64_t epoch, const std::vector<std::uint8_t>& processed) {
  check_mask(processed, "load");
  epoch_ = epoch;
  num_processed_ = 0;
  for (std::size_t i = 0; i < processed.size(); ++i) {
    processed_[i] = processed[i] ? 1 : 0;
    num_processed_ += processed_[i];
  }
  split(num_replicas_, rank_);
}

void ElasticSampler::check_mask(const std::vector<std::uint8_t>& mask, const char* what) const {
  if (mask.size() != processed_.size()) {
    throw InvalidArgumentError(std::string("ElasticSampler::") + what + ": the mask has " +
                               std::to_string(mask.size()) + " entries for a dataset of " +
                               std::to_string(processed_.size()));
  }
}

}  // namespace kolo::torch::elastic
