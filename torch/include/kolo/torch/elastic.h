// Elastic training with libtorch: the state kolo::elastic::run keeps across
// resets (a module, its optimizer, named values and samplers), and a sampler
// whose epoch survives a change of the job's size.
//
//   auto sampler = std::make_shared<kolo::torch::elastic::ElasticSampler>(dataset_size);
//   kolo::torch::elastic::TorchState state(model, adam);
//   std::int64_t& epoch = state.add_int("epoch");
//   state.add_sampler(sampler);
//   kolo::elastic::run(state, [&] {
//     while (epoch < epochs) {
//       for (std::size_t b = 0; b < sampler->num_batches(64); ++b) {
//         train_on(sampler->batch(b, 64));
//         sampler->record_batch(b, 64);
//         state.commit();
//       }
//       sampler->set_epoch(++epoch);
//       state.commit();
//     }
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/elastic.h"
#include "kolo/torch/compressor.h"

namespace at {
class Tensor;
}

namespace torch::nn {
class Module;
template <typename Contained>
class ModuleHolder;
}  // namespace torch::nn

namespace torch::optim {
class Optimizer;
}

namespace kolo::torch::elastic {

// kolo::elastic::digest of a tensor's bytes (copied to the CPU if need be),
// type and shape; 0 for an undefined tensor. TorchState::sync sends only the
// tensors whose digests differ from rank 0's.
std::uint64_t digest(const at::Tensor& tensor);

struct ElasticSamplerOptions {
  // A new order every epoch (seeded by seed + epoch), the same on every rank.
  bool shuffle = true;
  std::uint64_t seed = 0;
};

// Splits a dataset's indices over the ranks, as DistributedSampler does, and
// remembers which ones the epoch has processed: after a reset, the indices not
// yet processed are split over the new ranks, so that every index is processed
// once per epoch however often the job's size changes (counting the batches a
// commit kept). Each rank's share is padded, by repeating indices of the split,
// to the same length on every rank, so that every rank runs as many batches.
//
// Keep it in a TorchState (add_sampler), call record_batch() after each batch,
// and set_epoch() at the end of each epoch, before its commit. Batch numbers
// count from the last split: construction, set_epoch(), or a reset, restore or
// sync of the state; a commit does not split again.
class ElasticSampler {
 public:
  // Splits over the job's ranks (kolo::size(), kolo::rank()); needs kolo::init().
  explicit ElasticSampler(std::size_t dataset_size, ElasticSamplerOptions options = {});
  // Splits over `num_replicas` ranks as rank `rank`. Throws InvalidArgumentError
  // when rank is not in [0, num_replicas).
  ElasticSampler(std::size_t dataset_size, int num_replicas, int rank, ElasticSamplerOptions options = {});

  // Starts epoch `epoch` with no index processed.
  void set_epoch(std::uint64_t epoch);
  std::uint64_t epoch() const { return epoch_; }

  // This rank's share of the indices that were unprocessed at the last split.
  const std::vector<std::size_t>& indices() const { return indices_; }
  std::size_t num_samples() const { return indices_.size(); }
  // Batches of `batch_size` in the share (the last may be short).
  std::size_t num_batches(std::size_t batch_size) const;
  // The indices of batch `batch_index` of the share; empty past its end.
  std::vector<std::size_t> batch(std::size_t batch_index, std::size_t batch_size) const;

  // Marks batch `batch_index` of this rank's share processed.
  void record_batch(std::size_t batch_index, std::size_t batch_size);
  // Marks dataset indices processed; throws InvalidArgumentError past the dataset.
  void record_indices(const std::vector<std::size_t>& indices);

  // Splits the unprocessed indices over the job's ranks now (kolo::size(), kolo::rank()).
  void reset();
  // The same for an explicit place (tools and tests).
  void split(int num_replicas, int rank);
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

  std::size_t dataset_size() const { return processed_.size(); }
  // Distinct indices processed this epoch.
  std::size_t num_processed() const { return num_processed_; }
  // Unprocessed indices at the last split: the shares' length without padding.
  std::size_t num_remaining() const { return num_remaining_; }
  const ElasticSamplerOptions& options() const { return options_; }

  // The epoch's progress: processed()[i] is 1 when index i is processed, else 0.
  const std::vector<std::uint8_t>& processed() const { return processed_; }
  // Adds the indices `mask` marks (another rank's progress) without splitting again.
  void record_processed(const std::vector<std::uint8_t>& mask);
  // Replaces epoch and progress (a saved or rank 0's state) and splits again over
  // the current place. Throws InvalidArgumentError when the mask's size is not the
  // dataset's.
  void load(std::uint64_t epoch, const std::vector<std::uint8_t>& processed);

 private:
  void check_mask(const std::vector<std::uint8_t>& mask, const char* what) const;

  ElasticSamplerOptions options_;
  std::uint64_t epoch_ = 0;
  std::vector<std::uint8_t> processed_;
  std::size_t num_processed_ = 0;
  int num_replicas_ = 1;
  int rank_ = 0;
  std::size_t num_remaining_ = 0;
  std::vector<std::size_t> indices_;
};

// A libtorch training's state for kolo::elastic::run: a module's parameters and
// buffers, its optimizer's state and param-group options, named int64 and double
// values, and ElasticSamplers.
//
// - commit() (save()) keeps a copy of each in memory (tensors copied to the CPU)
//   after merging every rank's sampler progress: a collective when the state
//   has samplers, so every rank commits at the same steps.
// - restore() puts the copy back, bitwise, in place: the module's tensors and
//   the optimizer stay the ones training uses.
// - sync() gives every rank rank 0's state (a rank that joined, or whose
//   optimizer has no state yet, takes rank 0's as it is), then saves it.
// - After each reset the samplers split what remains over the new ranks.
//
// Every rank must build it alike: the same module structure, optimizer type
// and param groups, values and samplers, in the same order, before run().
class TorchState : public kolo::elastic::State {
 public:
  // Throws InvalidArgumentError when the module or the optimizer is null.
  TorchState(std::shared_ptr<::torch::nn::Module> module, std::shared_ptr<::torch::optim::Optimizer> optimizer);
  // A TORCH_MODULE holder (torch::nn::Linear, or a network declared with it);
  // an empty one counts as null.
  template <typename Impl>
  TorchState(const ::torch::nn::ModuleHolder<Impl>& module, std::shared_ptr<::torch::optim::Optimizer> optimizer)
      : TorchState(module.is_empty() ? nullptr : std::shared_ptr<::torch::nn::Module>(module.ptr()),
                   std::move(optimizer)) {}
  ~TorchState() override;

  // Declares a value kept with the state, saved at once with `initial`. The
  // reference stays valid as long as the state. Throws InvalidArgumentError when
  // the name is empty or taken.
  std::int64_t& add_int(const std::string& name, std::int64_t initial = 0);
  double& add_double(const std::string& name, double initial = 0.0);
  // A declared value; throws InvalidArgumentError for an unknown name or another type.
  std::int64_t& int_value(const std::string& name);
  double& double_value(const std::string& name);

  // Keeps the sampler's progress with the state, saved at once. Throws
  // InvalidArgumentError for a null sampler or one added already.
  void add_sampler(std::shared_ptr<ElasticSampler> sampler);

  // Keeps a gradient compressor's memory (PowerSGD's error feedback and
  // factors, its step count) with the state, saved at once: a restore puts it
  // back with the model, and a sync gives every rank rank 0's step count and
  // factors while each keeps its own error feedback (a joiner starts without).
  // Throws InvalidArgumentError for a null compressor or one added already.
  void add_compressor(std::shared_ptr<GradientCompressor> compressor);

  void save() override;
  void restore() override;
  void sync() override;
  // The samplers split what remains of their epochs over the new ranks.
  void reset() override;

  ::torch::nn::Module& module() const;
  ::torch::optim::Optimizer& optimizer() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::torch::elastic
