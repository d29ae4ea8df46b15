// An optimizer as bytes, as broadcast_optimizer_state sends it and an elastic
// TorchState keeps it: its own archive, plus the param groups' options, which
// Optimizer::load does not restore. Defined in broadcast.cc.
#pragma once

#include <torch/optim/optimizer.h>

#include <string>

namespace kolo::torch {

std::string save_optimizer(const ::torch::optim::Optimizer& optimizer);
// Replaces the optimizer's state (entries made since the save go) and options.
void load_optimizer(::torch::optim::Optimizer& optimizer, const std::string& bytes);
// Root's `saved` (save_optimizer's bytes; ignored elsewhere) loaded into every
// other rank's optimizer; MismatchError where it does not fit.
void broadcast_saved_optimizer(::torch::optim::Optimizer& optimizer, const std::string& saved, int root,
                               const std::string& name);

}  // namespace kolo::torch
