// One DistributedOptimizer step and a metric average, built against an installed kolo.
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cstdio>

#include "kolo/torch.h"

int main() {
  kolo::init();
  torch::nn::Linear model(3, 2);
  kolo::torch::broadcast_parameters(*model, 0);
  auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), 0.1);
  kolo::torch::DistributedOptimizer optimizer(sgd, model->named_parameters());
  optimizer.zero_grad();
  model->forward(torch::ones({4, 3})).sum().backward();
  optimizer.step();
  const double average = kolo::torch::average_metric(1.0 + kolo::rank(), "loss");
  std::printf("torch consumer: rank %d of %d, average %.1f\n", kolo::rank(), kolo::size(), average);
  kolo::shutdown();
}
