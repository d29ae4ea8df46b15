#include "kolo/types.h"

#include "common/tensor_bytes.h"
#include "kolo/error.h"

namespace kolo {

void detail::throw_invalid_data_type(DataType dtype) {
  throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
}

const char* to_string(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return "uint8";
    case DataType::Int8: return "int8";
    case DataType::Int16: return "int16";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Bool: return "bool";
  }
  return "invalid";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "product";
  }
  return "invalid";
}

bool is_floating_point(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16 || dtype == DataType::Float32 ||
         dtype == DataType::Float64;
}

bool is_valid(DataType dtype) { return static_cast<int>(dtype) < kNumDataTypes; }
bool is_valid(ReduceOp op) { return static_cast<int>(op) < kNumReduceOps; }

std::int64_t num_elements(const Shape& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

detail::ShapeFault detail::shape_fault(DataType dtype, const Shape& shape, std::size_t& bytes) {
  // The dimensions other than zeros must fit together as well: a shape that
  // holds nothing may still describe rows (allgather's, alltoall's) that do not.
  std::int64_t n = static_cast<std::int64_t>(element_size(dtype));
  bool empty = false;
  for (auto d : shape) {
    if (d < 0) return ShapeFault::Negative;
    if (d == 0) empty = true;
    else if (__builtin_mul_overflow(n, d, &n)) return ShapeFault::Overflow;
  }
  bytes = empty ? 0 : static_cast<std::size_t>(n);
  return ShapeFault::None;
}

void detail::throw_shape_fault(ShapeFault fault, DataType dtype, const Shape& shape, const std::string& what) {
  if (fault == ShapeFault::Negative) throw InvalidArgumentError(what + " has a negative dimension " + to_string(shape));
  throw InvalidArgumentError(what + " of shape " + to_string(shape) + " and dtype " + to_string(dtype) +
                             " has more bytes than an int64 counts");
}

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace kolo
