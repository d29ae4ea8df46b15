// Trains a small model with kolo::torch's DistributedOptimizer and PowerSGD and
// writes its final parameters (float64, in named_parameters() order) to the
// file named on the command line, from rank 0. tests/python/test_powersgd.py
// trains the same model on the same data with kolo.torch and expects the same
// bits: the model, the data and the starting weights are formulas both sides
// compute with the same libtorch operations.
//
//   kolorun -np 2 kolo_powersgd_bits OUT
#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>
#include <fstream>
#include <memory>

#include "kolo/kolo.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/powersgd.h"

namespace {

constexpr int kRows = 4;  // samples per rank and step
constexpr int kSteps = 5;

// Values of the i-th parameter: sin(0.37 k + i) / 5 for its k-th element.
void set_weights(::torch::nn::Sequential& model) {
  at::NoGradGuard no_grad;
  int i = 0;
  for (auto& p : model->parameters()) {
    const at::Tensor k = at::arange(p.numel(), at::TensorOptions().dtype(at::kDouble));
    p.copy_((at::sin(k * 0.37 + i) / 5).reshape(p.sizes()));
    ++i;
  }
}

at::Tensor inputs(int step, int rank) {
  const at::Tensor k = at::arange(kRows * 32, at::TensorOptions().dtype(at::kDouble));
  return at::cos(k * 0.13 + (step * 7 + rank)).reshape({kRows, 32});
}

at::Tensor targets(int step, int rank) {
  const at::Tensor k = at::arange(kRows * 16, at::TensorOptions().dtype(at::kDouble));
  return at::sin(k * 0.29 + (step + rank * 3)).reshape({kRows, 16});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kolorun -np N %s OUT\n", argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  kolo::init();
  auto model = ::torch::nn::Sequential(::torch::nn::Linear(32, 64), ::torch::nn::Tanh(), ::torch::nn::Linear(64, 16));
  model->to(at::kDouble);
  set_weights(model);
  kolo::torch::DistributedOptimizerOptions options;
  options.compressor =
      std::make_shared<kolo::torch::PowerSGD>(kolo::torch::PowerSGDOptions{.rank = 2, .min_size = 0});
  kolo::torch::DistributedOptimizer optimizer(
      std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1)),
      model->named_parameters(), options);
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    at::mse_loss(model->forward(inputs(step, kolo::rank())), targets(step, kolo::rank())).backward();
    optimizer.step();
  }
  if (kolo::rank() == 0) {
    std::ofstream out(argv[1], std::ios::binary);
    for (const auto& p : model->parameters()) {
      const at::Tensor flat = p.detach().contiguous();
      out.write(static_cast<const char*>(flat.data_ptr()), static_cast<std::streamsize>(flat.nbytes()));
    }
  }
  kolo::shutdown();
  return 0;
}
