// DistributedOptimizer: data-parallel training with any torch::optim optimizer.
//
// It wraps an optimizer and averages each parameter's gradient across ranks. The
// allreduce of a parameter starts as soon as backward has produced its gradient
// (a post hook on the parameter's gradient accumulator), so communication overlaps
// the rest of backward; step() waits for what is still in flight, then steps the
// wrapped optimizer.
//
// Operations are named "<name_prefix>.<parameter name>": ranks match gradients by
// name and kolo's response cache recognizes them from the second step on. Every
// rank must wrap the same parameters under the same names.
//
// Not thread-safe: one thread drives backward, synchronize() and step().
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/ordered_dict.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/torch/compressor.h"
#include "kolo/types.h"

namespace torch::optim {
class Optimizer;
}

namespace kolo::torch {

// How gradients travel: as they are, or cast to 16 bits before the allreduce and
// back to their own dtype after it (half the bytes, less precision).
enum class Compression { None, FP16, BF16 };

// Parses "none", "fp16" or "bf16"; throws InvalidArgumentError otherwise.
Compression parse_compression(const std::string& text);
const char* to_string(Compression compression);

struct DistributedOptimizerOptions {
  // Gradients accumulate locally over this many backward passes; the allreduce
  // starts on the last one. Call step() every backward_passes_per_step passes.
  int backward_passes_per_step = 1;
  Compression compression = Compression::None;
  // ReduceOp::Average or ReduceOp::Sum.
  ReduceOp op = ReduceOp::Average;
  // With Average, gradients are divided by this factor before the sum and
  // multiplied by factor / size after it (Horovod's gradient_predivide_factor): a
  // way to keep large sums of fp16 gradients in range.
  double gradient_predivide_factor = 1.0;
  // Two optimizers in one job need different prefixes.
  std::string name_prefix = "kolo.grad";
  // Reduces the gradients it takes in a form of its own (PowerSGD, powersgd.h);
  // the others are allreduced as `compression` says, which must then be None.
  // One compressor per optimizer. Every rank's must have the same settings: the
  // first synchronize() of each session checks, and throws InvalidArgumentError
  // on every rank when they differ (that step's gradients start there, not
  // during backward).
  std::shared_ptr<GradientCompressor> compressor;
};

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

class DistributedOptimizer {
 public:
  // `named_parameters` names the optimizer's parameters (module->named_parameters());
  // parameters of the optimizer that it does not name are named by their position
  // in the param groups. Parameters that do not require grad are left alone.
  // Throws InvalidArgumentError on invalid options or duplicate names.
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer, const NamedParameters& named_parameters,
                       DistributedOptimizerOptions options = {});
  DistributedOptimizer(std::shared_ptr<::torch::optim::Optimizer> optimizer,
                       const ::torch::OrderedDict<std::string, at::Tensor>& named_parameters,
                       DistributedOptimizerOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(DistributedOptimizer&&) noexcept;
  DistributedOptimizer& operator=(DistributedOptimizer&&) noexcept;
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Completes the gradient reduction: starts the allreduce of every parameter whose
  // hook has not fired (with a zero gradient for a parameter that got none, so
  // that every rank submits the same names), waits for all of them and writes the
  // results into the gradients. Use it to look at or clip the averaged gradients
  // before step().
  void synchronize();

  // Steps the wrapped optimizer on the averaged gradients. It synchronizes first,
  // unless synchronize() was called since the last step() and no gradient arrived
  // after it (so clip_grad_norm_ between synchronize() and step() is honoured).
  void step();

  void zero_grad();

  ::torch::optim::Optimizer& optimizer();
  const DistributedOptimizerOptions& options() const;
  // The operation names, one per managed parameter, in param-group order.
  std::vector<std::string> operation_names() const;

 private:
  class State;
  State& state() const;
  std::shared_ptr<State> state_;
};

}  // namespace kolo::torch
