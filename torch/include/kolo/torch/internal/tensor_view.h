// Helpers shared by the kolo::torch sources and the Python binding.
// Internal to kolo::torch and kolo.torch, not a stable API.
#pragma once

#include <ATen/core/Tensor.h>

#include "kolo/types.h"

namespace kolo::torch::detail {

// Throws InvalidArgumentError unless `tensor` is a defined, dense CPU tensor of a
// dtype kolo carries. Contiguity is not required.
void check_supported(const at::Tensor& tensor);

// A tensor that owns the memory of a kolo Buffer.
at::Tensor from_buffer(Buffer buffer);

}  // namespace kolo::torch::detail
