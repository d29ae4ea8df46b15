// kolo::torch: distributed data-parallel training for the libtorch C++ frontend.
// Include this one header.
//
//   kolo::init();
//   auto model = std::make_shared<Net>();
//   kolo::torch::broadcast_parameters(*model, /*root=*/0);
//   auto sgd = std::make_shared<torch::optim::SGD>(model->parameters(), 0.01 * kolo::size());
//   kolo::torch::DistributedOptimizer optimizer(sgd, model->named_parameters());
//   for (...) {
//     optimizer.zero_grad();
//     loss_fn(model->forward(x), y).backward();  // gradients are averaged during backward
//     optimizer.step();
//   }
#pragma once

#include "kolo/kolo.h"
#include "kolo/torch/broadcast.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/elastic.h"
#include "kolo/torch/metrics.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/powersgd.h"
#include "kolo/torch/sampler.h"
