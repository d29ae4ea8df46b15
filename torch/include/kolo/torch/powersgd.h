// PowerSGD: low-rank gradient compression with error feedback (Vogels et al.,
// NeurIPS 2019), the method of PyTorch DDP's PowerSGD communication hook.
//
// Each gradient it takes is seen as a matrix M (its first dimension by the
// rest). One step of power iteration approximates M by P Q^T of rank r:
//   M += E             (the error the last step left: error feedback)
//   P  = M Q           (Q: the last step's, or random)  -> allreduce P (sum)
//   P  = orthonormal columns of P
//   Q  = M^T P                                          -> allreduce Q (average)
//   E  = M - P Q^T,  and the gradient becomes P Q^T.
// A rank then sends r (n + m) numbers instead of n m. The factors of all
// matrices travel after backward in up to four chunks a dtype, each chunk's P
// in one allreduce and its Q in another: a step costs at most eight
// collectives for all compressed gradients, and one chunk's Q is on the wire
// while the next chunk's is computed. Every rank computes the same P Q^T from
// the same reduced factors, so replicas stay bitwise equal.
//
// Gradients with one dimension (biases, norms), smaller than min_size elements,
// or whose factors would not be smaller than the matrix are allreduced whole, as
// are all gradients before start_step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kolo/torch/compressor.h"

namespace kolo::torch {

struct PowerSGDOptions {
  // The rank r of the approximation; a matrix with a smaller side uses that side.
  int rank = 4;
  // The steps allreduced whole before compression starts (DDP's
  // start_powerSGD_iter): the first steps move fast and suffer most from it.
  std::int64_t start_step = 0;
  // Gradients with fewer elements travel whole.
  std::int64_t min_size = 16384;
  // Q carries over from step to step (better approximations), else it is drawn
  // afresh every step.
  bool warm_start = true;
  // Carry each step's residual into the next: what makes the method converge
  // as uncompressed training does. Off only to measure what it is worth.
  bool error_feedback = true;
  // Seeds the random Q, the same on every rank.
  std::uint64_t seed = 0;
};

class PowerSGD final : public GradientCompressor {
 public:
  // Throws InvalidArgumentError for a rank below 1, a negative start_step or
  // min_size.
  explicit PowerSGD(PowerSGDOptions options = {});
  ~PowerSGD() override;

  const PowerSGDOptions& options() const { return options_; }

  std::string settings() const override;
  bool takes(const at::Tensor& grad) const override;
  void add(const std::string& name, const at::Tensor& grad) override;
  void finish() override;
  void abandon() override;
  std::int64_t steps() const override;
  TensorMemory memory() const override;
  void load_memory(const TensorMemory& memory) override;

  // Elements one rank sent in the last finish() (the factors), and what the
  // gradients it compressed hold: their ratio is the compression.
  std::int64_t last_sent_elements() const;
  std::int64_t last_compressed_elements() const;
  // Allreduces the last finish() took: a P and a Q for each chunk of factors.
  std::int64_t last_allreduces() const;

 private:
  struct Impl;
  PowerSGDOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kolo::torch
