// GradientCompressor's binding to one optimizer, and the ranks' agreement on settings.
#include "kolo/torch/compressor.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>

#include <cstring>

#include "kolo/error.h"
#include "kolo/process_set.h"
#include "kolo/torch/collectives.h"

namespace kolo::torch {

void GradientCompressor::bind(CompressorBinding binding) {
  if (binding_) {
    throw InvalidArgumentError("a gradient compressor serves one DistributedOptimizer; make another one for this one");
  }
  if (binding.op != ReduceOp::Average && binding.op != ReduceOp::Sum) {
    throw InvalidArgumentError(std::string("a gradient compressor reduces with average or sum, not ") +
                               kolo::to_string(binding.op));
  }
  binding_ = std::move(binding);
}

const CompressorBinding& GradientCompressor::binding() const {
  if (!binding_) throw InvalidArgumentError("the gradient compressor is not bound to a DistributedOptimizer");
  return *binding_;
}

void check_settings_agree(const GradientCompressor& compressor) {
  const CompressorBinding& binding = compressor.binding();
  const std::string mine = compressor.settings();
  CollectiveOptions options;
  options.process_set = binding.process_set;
  options.name = binding.name_prefix + ".compressor.settings.length";
  const at::Tensor lengths =
      allgather(at::tensor({static_cast<std::int64_t>(mine.size())}, at::TensorOptions().dtype(at::kLong)), options);
  at::Tensor bytes = at::empty({static_cast<std::int64_t>(mine.size())}, at::TensorOptions().dtype(at::kByte));
  if (!mine.empty()) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  options.name = binding.name_prefix + ".compressor.settings";
  const at::Tensor all = allgather(bytes, options);

  const std::vector<int> ranks = process_set_ranks(binding.process_set);
  std::vector<std::string> settings;
  const auto* data = static_cast<const char*>(all.data_ptr());
  std::int64_t offset = 0;
  for (std::int64_t i = 0; i < lengths.numel(); ++i) {
    const std::int64_t length = lengths[i].item<std::int64_t>();
    settings.emplace_back(data + offset, static_cast<std::size_t>(length));
    offset += length;
  }
  bool differ = false;
  for (const std::string& s : settings) differ |= s != settings.front();
  if (!differ) return;
  std::string message = "DistributedOptimizer: the ranks' gradient compressors differ:";
  for (std::size_t i = 0; i < settings.size(); ++i) {
    const int rank = i < ranks.size() ? ranks[i] : static_cast<int>(i);
    message += (i ? ", rank " : " rank ") + std::to_string(rank) + " has '" + settings[i] + "'";
  }
  throw InvalidArgumentError(message + "; every rank must compress with the same settings");
}

}  // namespace kolo::torch
