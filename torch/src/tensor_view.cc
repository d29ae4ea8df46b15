// Mapping between libtorch tensors and kolo's views of contiguous memory.
#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <string>

#include "kolo/error.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/internal/tensor_view.h"

namespace kolo::torch {

DataType to_kolo_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte: return DataType::UInt8;
    case c10::ScalarType::Char: return DataType::Int8;
    case c10::ScalarType::Short: return DataType::Int16;
    case c10::ScalarType::Int: return DataType::Int32;
    case c10::ScalarType::Long: return DataType::Int64;
    case c10::ScalarType::Half: return DataType::Float16;
    case c10::ScalarType::BFloat16: return DataType::BFloat16;
    case c10::ScalarType::Float: return DataType::Float32;
    case c10::ScalarType::Double: return DataType::Float64;
    case c10::ScalarType::Bool: return DataType::Bool;
    default: break;
  }
  throw InvalidArgumentError(std::string("kolo cannot carry tensors of dtype ") + c10::toString(type) +
                             "; supported: uint8, int8, int16, int32, int64, float16, bfloat16, float32, "
                             "float64, bool (convert with .to())");
}

c10::ScalarType to_torch_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return c10::ScalarType::Byte;
    case DataType::Int8: return c10::ScalarType::Char;
    case DataType::Int16: return c10::ScalarType::Short;
    case DataType::Int32: return c10::ScalarType::Int;
    case DataType::Int64: return c10::ScalarType::Long;
    case DataType::Float16: return c10::ScalarType::Half;
    case DataType::BFloat16: return c10::ScalarType::BFloat16;
    case DataType::Float32: return c10::ScalarType::Float;
    case DataType::Float64: return c10::ScalarType::Double;
    case DataType::Bool: return c10::ScalarType::Bool;
  }
  throw InvalidArgumentError("invalid kolo data type " + std::to_string(static_cast<int>(dtype)));
}

namespace detail {

void check_supported(const at::Tensor& tensor) {
  if (!tensor.defined()) throw InvalidArgumentError("kolo::torch got an undefined tensor");
  if (tensor.device().type() != c10::DeviceType::CPU) {
    throw InvalidArgumentError("kolo::torch supports CPU tensors only, got a tensor on " + tensor.device().str() +
                               " (move it with .cpu())");
  }
  if (tensor.layout() != c10::Layout::Strided) {
    throw InvalidArgumentError("kolo::torch supports dense (strided) tensors only, got a sparse or other layout "
                               "(convert it with .to_dense())");
  }
  to_kolo_dtype(tensor.scalar_type());
}

namespace {

// The deleter of a storage that owns a Buffer; it also marks such storages, so
// that a view of one can carry the Buffer's memory.
void delete_buffer(void* buffer) { delete static_cast<Buffer*>(buffer); }

// The Buffer `tensor`'s storage owns, if from_buffer made it.
const Buffer* owning_buffer(const at::Tensor& tensor) {
  if (!tensor.has_storage()) return nullptr;
  const c10::DataPtr& owner = tensor.storage().data_ptr();
  return owner.get_deleter() == &delete_buffer ? static_cast<const Buffer*>(owner.get_context()) : nullptr;
}

}  // namespace

at::Tensor from_buffer(Buffer buffer) {
  auto owned = std::make_unique<Buffer>(std::move(buffer));
  void* data = owned->data();
  const auto dtype = to_torch_dtype(owned->dtype());
  const std::vector<std::int64_t> shape = owned->shape();
  return at::for_blob(data, shape)
      .context(owned.release(), &delete_buffer)
      .options(at::TensorOptions().dtype(dtype).device(c10::kCPU))
      .make_tensor();
}

}  // namespace detail

kolo::Tensor view_of(const at::Tensor& tensor) {
  detail::check_supported(tensor);
  if (!tensor.is_contiguous()) {
    throw InvalidArgumentError("kolo needs a contiguous tensor here (call .contiguous() first)");
  }
  kolo::Tensor view;
  view.data = tensor.data_ptr();
  view.dtype = to_kolo_dtype(tensor.scalar_type());
  view.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  // A tensor over a kolo Buffer (an allgather's output, say) carries the
  // Buffer's shareable memory, so that collectives may work in place of it.
  if (const Buffer* buffer = detail::owning_buffer(tensor)) view.memory = buffer->memory();
  return view;
}

}  // namespace kolo::torch
