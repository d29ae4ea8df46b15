// Making every rank start from root's state: parameters and buffers, optimizer
// state, and arbitrary values.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <torch/ordered_dict.h>

#include <string>

#include "kolo/torch/optimizer.h"

namespace torch::nn {
class Module;
}

namespace kolo::torch {

// Overwrites every rank's parameters and buffers (batch-norm statistics...) with
// root's, in place. Operations are named "<name_prefix>.<tensor name>": every rank
// must pass a module of the same structure.
void broadcast_parameters(const ::torch::nn::Module& module, int root,
                          const std::string& name_prefix = "kolo.broadcast");
void broadcast_parameters(const NamedParameters& named_tensors, int root,
                          const std::string& name_prefix = "kolo.broadcast");
void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root,
                          const std::string& name_prefix = "kolo.broadcast");

// Gives every rank root's optimizer state (momentum buffers, Adam moments and step
// counts...) and root's param-group options (learning rate...). The optimizers
// must be of one type with the same param-group structure on every rank; a
// structural mismatch is a MismatchError. Works on any torch::optim optimizer
// that implements save() and load().
void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root,
                               const std::string& name = "kolo.optimizer_state");
void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root,
                               const std::string& name = "kolo.optimizer_state");

// Root's bytes on every rank (their length need not be known elsewhere).
std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name = "kolo.broadcast_bytes");

// Root's value on every rank: anything libtorch can pickle (numbers, strings,
// tensors, lists, dicts, tuples of those). Other ranks' `value` is ignored.
c10::IValue broadcast_object(const c10::IValue& value, int root, const std::string& name = "kolo.broadcast_object");

}  // namespace kolo::torch
