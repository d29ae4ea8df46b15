#include "kolo/types.h"

#include "kolo/error.h"

namespace kolo {

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Float64: return 8;
  }
  throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
}

const char* to_string(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return "uint8";
    case DataType::Int8: return "int8";
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

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Buffer::Buffer(DataType dtype, Shape shape)
    : dtype_(dtype), shape_(std::move(shape)),
      bytes_(static_cast<std::size_t>(num_elements(shape_)) * element_size(dtype)) {}

}  // namespace kolo
