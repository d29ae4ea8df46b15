// Gradient compressors with memory between steps, for DistributedOptimizer.
//
// A compressor reduces some of a step's gradients across ranks in a form of its
// own (low-rank factors, chosen entries, signs) instead of allreducing them
// whole; the optimizer allreduces the rest as they are. The optimizer gives it
// each gradient it takes() as backward produces it (add()), then finish()
// reduces them and writes each one's average, exact or approximate, back into
// it. What the compressor keeps between steps (error feedback, warm-start
// factors, its step count) is its memory(): checkpoints and elastic commits
// carry it.
//
// A new method implements this class; the optimizer needs no change for it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/process_set.h"
#include "kolo/types.h"

namespace kolo::torch {

// Where a compressor's collectives go, set by the optimizer that uses it.
struct CompressorBinding {
  ReduceOp op = ReduceOp::Average;  // Average or Sum of the ranks' gradients
  ProcessSet process_set{};
  std::string name_prefix = "kolo.grad";  // its operations are "<prefix>.<method>.<what>"
};

using TensorMemory = std::vector<std::pair<std::string, at::Tensor>>;

// Names memory() gives to what differs from rank to rank by design (error
// feedback): a state's sync leaves it alone.
inline constexpr const char* kLocalMemoryPrefix = "local.";

class GradientCompressor {
 public:
  virtual ~GradientCompressor() = default;

  // Called once by the optimizer that uses the compressor; a second optimizer
  // binding the same compressor throws InvalidArgumentError.
  void bind(CompressorBinding binding);
  bool bound() const { return binding_.has_value(); }
  const CompressorBinding& binding() const;

  // The method and every setting the ranks must agree on, in one line.
  virtual std::string settings() const = 0;

  // Whether `grad` goes through the compressor in the step finish() will end.
  // Depends only on the settings, the gradient's shape and dtype, and the step
  // count, so that every rank answers alike.
  virtual bool takes(const at::Tensor& grad) const = 0;

  // A complete gradient: local work starts on it. `name` names it alike on
  // every rank and once per step. The compressor may change `grad` in place
  // until finish() writes its result.
  virtual void add(const std::string& name, const at::Tensor& grad) = 0;

  // Reduces every gradient added since the last finish() and writes the
  // results into them, then counts a step (also when nothing was added). Every
  // rank calls it once per step. On an exception nothing is left in flight;
  // the gradients then hold no meaningful values.
  virtual void finish() = 0;

  // Forgets what was added since the last finish() (zero_grad(), a failure).
  virtual void abandon() = 0;

  // The steps finish() has counted.
  virtual std::int64_t steps() const = 0;

  // The memory kept between steps, by name: the compressor's own tensors (a
  // commit copies them). Memory that differs from rank to rank by design, such
  // as error feedback, is named kLocalMemoryPrefix + ...; a state's sync leaves it alone.
  virtual TensorMemory memory() const = 0;
  // Replaces the memory with one memory() gave (copied in). Names missing from
  // `memory` start empty; a name the compressor does not know throws
  // InvalidArgumentError.
  virtual void load_memory(const TensorMemory& memory) = 0;

 private:
  std::optional<CompressorBinding> binding_;
};

// Throws InvalidArgumentError on every rank of the binding's process set
// unless all of them hold a compressor with the same settings(). Collective.
void check_settings_agree(const GradientCompressor& compressor);

}  // namespace kolo::torch
