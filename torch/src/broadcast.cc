// Broadcast of module parameters, optimizer state and serialized values.
#include "kolo/torch/broadcast.h"

#include <c10/util/Exception.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "kolo/collectives.h"
#include "kolo/error.h"
#include "kolo/runtime.h"
#include "kolo/torch/collectives.h"
#include "optimizer_bytes.h"

namespace kolo::torch {
namespace {

NamedParameters to_named(const ::torch::OrderedDict<std::string, at::Tensor>& dict) {
  NamedParameters named;
  for (const auto& item : dict) named.emplace_back(item.key(), item.value());
  return named;
}

std::string group_options_key(std::size_t group) { return "kolo/param_group_options/" + std::to_string(group); }

}  // namespace

std::string save_optimizer(const ::torch::optim::Optimizer& optimizer) {
  ::torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  // Optimizer::load restores the per-parameter state but not the groups'
  // options, so they travel beside it.
  const auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ::torch::serialize::OutputArchive options(archive.compilation_unit());
    groups[g].options().serialize(options);
    archive.write(group_options_key(g), options);
  }
  std::ostringstream stream;
  archive.save_to(stream);
  return stream.str();
}

void load_optimizer(::torch::optim::Optimizer& optimizer, const std::string& bytes) {
  ::torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  // State root does not have (not yet created there) must not survive here.
  optimizer.state().clear();
  optimizer.load(archive);
  auto& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ::torch::serialize::InputArchive options;
    archive.read(group_options_key(g), options);
    groups[g].options().serialize(options);
  }
}

void broadcast_parameters(const NamedParameters& named_tensors, int root, const std::string& name_prefix) {
  std::vector<TensorHandle> handles;
  handles.reserve(named_tensors.size());
  for (const auto& [name, tensor] : named_tensors) {
    CollectiveOptions options;
    options.name = name_prefix + "." + name;
    handles.push_back(broadcast_async_(tensor, root, options));
  }
  // Wait for all before reporting the first error: kolo may be writing the others.
  std::exception_ptr error;
  for (const TensorHandle& handle : handles) {
    try {
      handle.wait();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

void broadcast_parameters(const ::torch::OrderedDict<std::string, at::Tensor>& named_tensors, int root,
                          const std::string& name_prefix) {
  broadcast_parameters(to_named(named_tensors), root, name_prefix);
}

void broadcast_parameters(const ::torch::nn::Module& module, int root, const std::string& name_prefix) {
  NamedParameters named = to_named(module.named_parameters());
  for (auto& [name, buffer] : to_named(module.named_buffers())) named.emplace_back("buffer." + name, buffer);
  broadcast_parameters(named, root, name_prefix);
}

void broadcast_saved_optimizer(::torch::optim::Optimizer& optimizer, const std::string& saved, int root,
                               const std::string& name) {
  const bool is_root = kolo::rank() == root;
  std::string bytes = broadcast_bytes(is_root ? saved : std::string(), root, name);
  if (is_root) return;
  try {
    load_optimizer(optimizer, bytes);
  } catch (const c10::Error& e) {
    throw MismatchError("broadcast_optimizer_state: root's optimizer state does not fit this rank's optimizer "
                        "(same optimizer type and param groups on every rank?): " +
                        std::string(e.what_without_backtrace()));
  }
}

void broadcast_optimizer_state(::torch::optim::Optimizer& optimizer, int root, const std::string& name) {
  broadcast_saved_optimizer(optimizer, kolo::rank() == root ? save_optimizer(optimizer) : std::string(), root, name);
}

void broadcast_optimizer_state(DistributedOptimizer& optimizer, int root, const std::string& name) {
  broadcast_optimizer_state(optimizer.optimizer(), root, name);
}

std::string broadcast_bytes(const std::string& bytes, int root, const std::string& name) {
  std::int64_t length = static_cast<std::int64_t>(bytes.size());
  CollectiveOptions length_options;
  length_options.name = name + ".length";
  kolo::broadcast(make_tensor(&length, 1), root, length_options);
  if (length < 0) throw PeerFailureError(root, "broadcast_bytes: root sent a negative length");

  std::string received = kolo::rank() == root ? bytes : std::string(static_cast<std::size_t>(length), '\0');
  if (length > 0) {
    CollectiveOptions data_options;
    data_options.name = name + ".data";
    kolo::broadcast(make_tensor(reinterpret_cast<std::uint8_t*>(received.data()), length), root, data_options);
  }
  return received;
}

c10::IValue broadcast_object(const c10::IValue& value, int root, const std::string& name) {
  std::string pickled;
  if (kolo::rank() == root) {
    std::vector<char> bytes = ::torch::pickle_save(value);
    pickled.assign(bytes.begin(), bytes.end());
  }
  std::string received = broadcast_bytes(pickled, root, name);
  if (kolo::rank() == root) return value;
  try {
    return ::torch::pickle_load(std::vector<char>(received.begin(), received.end()));
  } catch (const c10::Error& e) {
    throw InvalidArgumentError(std::string("broadcast_object: could not unpickle root's value: ") +
                               e.what_without_backtrace());
  }
}

}  // namespace kolo::torch
