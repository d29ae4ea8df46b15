// Per-rank shards of a dataset, permuted identically on every rank.
#include "kolo/torch/sampler.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "kolo/error.h"
#include "kolo/runtime.h"

namespace kolo::torch {
namespace {

// A uniform integer in [0, bound) from the generator's raw output. Written out
// rather than std::uniform_int_distribution, whose algorithm is up to the standard
// library: ranks built against different libraries must still agree.
std::uint64_t uniform_below(std::mt19937_64& generator, std::uint64_t bound) {
  // Reject the top sliver of the range that would bias the modulo.
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t limit = kMax - kMax % bound;
  std::uint64_t draw;
  do {
    draw = generator();
  } while (draw >= limit);
  return draw % bound;
}

void permute(std::vector<std::size_t>& order, std::uint64_t seed) {
  std::mt19937_64 generator(seed);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[uniform_below(generator, i)]);
  }
}

void check_place(int num_replicas, int rank) {
  if (num_replicas < 1) {
    throw InvalidArgumentError("DistributedSampler: num_replicas must be at least 1, got " +
                               std::to_string(num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw InvalidArgumentError("DistributedSampler: rank " + std::to_string(rank) + " is outside [0, " +
                               std::to_string(num_replicas) + ")");
  }
}

}  // namespace

std::vector<std::size_t> shard_indices(std::size_t dataset_size, int num_replicas, int rank, std::uint64_t epoch,
                                       const SamplerOptions& options) {
  check_place(num_replicas, rank);
  const auto replicas = static_cast<std::size_t>(num_replicas);
  std::vector<std::size_t> order(dataset_size);
  for (std::size_t i = 0; i < dataset_size; ++i) order[i] = i;
  if (options.shuffle) permute(order, options.seed + epoch);

  const std::size_t per_rank =
      options.drop_last ? dataset_size / replicas : (dataset_size + replicas - 1) / replicas;
  std::vector<std::size_t> shard;
  shard.reserve(per_rank);
  for (std::size_t k = 0; k < per_rank; ++k) {
    // Positions past the end wrap around to the start, as often as needed.
    const std::size_t position = k * replicas + static_cast<std::size_t>(rank);
    shard.push_back(order[position % dataset_size]);
  }
  return shard;
}

DistributedSampler::DistributedSampler(std::size_t dataset_size, SamplerOptions options)
    : DistributedSampler(dataset_size, kolo::size(), kolo::rank(), options) {}

DistributedSampler::DistributedSampler(std::size_t dataset_size, int num_replicas, int rank, SamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  check_place(num_replicas, rank);
  rebuild();
}

void DistributedSampler::set_epoch(std::uint64_t epoch) {
  epoch_ = epoch;
  rebuild();
}

void DistributedSampler::rebuild() {
  indices_ = shard_indices(dataset_size_, num_replicas_, rank_, epoch_, options_);
  cursor_ = 0;
}

void DistributedSampler::reset(c10::optional<std::size_t> new_size) {
  if (new_size) {
    dataset_size_ = *new_size;
    rebuild();
  }
  cursor_ = 0;
}

c10::optional<std::vector<std::size_t>> DistributedSampler::next(std::size_t batch_size) {
  if (cursor_ >= indices_.size()) return c10::nullopt;
  const std::size_t end = std::min(indices_.size(), cursor_ + batch_size);
  std::vector<std::size_t> batch(indices_.begin() + static_cast<std::ptrdiff_t>(cursor_),
                                 indices_.begin() + static_cast<std::ptrdiff_t>(end));
  cursor_ = end;
  return batch;
}

void DistributedSampler::save(::torch::serialize::OutputArchive& archive) const {
  archive.write("kolo_sampler/epoch", c10::IValue(static_cast<std::int64_t>(epoch_)));
  archive.write("kolo_sampler/cursor", c10::IValue(static_cast<std::int64_t>(cursor_)));
}

void DistributedSampler::load(::torch::serialize::InputArchive& archive) {
  c10::IValue epoch;
  c10::IValue cursor;
  archive.read("kolo_sampler/epoch", epoch);
  archive.read("kolo_sampler/cursor", cursor);
  if (!epoch.isInt() || !cursor.isInt() || epoch.toInt() < 0 || cursor.toInt() < 0) {
    throw InvalidArgumentError("DistributedSampler::load: the archive's epoch or cursor is not a non-negative integer");
  }
  set_epoch(static_cast<std::uint64_t>(epoch.toInt()));
  cursor_ = std::min(indices_.size(), static_cast<std::size_t>(cursor.toInt()));
}

}  // namespace kolo::torch
