#include "harness/values.h"

#include <cmath>
#include <cstring>

#include "common/half.h"

namespace kolo::testing {

double value_at(int rank, std::int64_t index, DataType dtype, int salt) {
  std::uint64_t h = static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull ^
                    static_cast<std::uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full ^ static_cast<std::uint64_t>(salt) * 31;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  if (dtype == DataType::Bool) return static_cast<double>(h % 2);
  if (dtype == DataType::UInt8) return static_cast<double>(h % 9);
  return static_cast<double>(h % 9) - 4.0;
}

double read_element(const void* data, DataType dtype, std::int64_t i) {
  switch (dtype) {
    case DataType::UInt8: return static_cast<const std::uint8_t*>(data)[i];
    case DataType::Int8: return static_cast<const std::int8_t*>(data)[i];
    case DataType::Int16: return static_cast<const std::int16_t*>(data)[i];
    case DataType::Int32: return static_cast<const std::int32_t*>(data)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const std::int64_t*>(data)[i]);
    case DataType::Float16: return fp16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::BFloat16: return bf16_to_float(static_cast<const std::uint16_t*>(data)[i]);
    case DataType::Float32: return static_cast<const float*>(data)[i];
    case DataType::Float64: return static_cast<const double*>(data)[i];
    case DataType::Bool: return static_cast<const std::uint8_t*>(data)[i] ? 1.0 : 0.0;
  }
  return NAN;
}

void write_element(void* data, DataType dtype, std::int64_t i, double v) {
  switch (dtype) {
    case DataType::UInt8: static_cast<std::uint8_t*>(data)[i] = static_cast<std::uint8_t>(v); break;
    case DataType::Int8: static_cast<std::int8_t*>(data)[i] = static_cast<std::int8_t>(v); break;
    case DataType::Int16: static_cast<std::int16_t*>(data)[i] = static_cast<std::int16_t>(v); break;
    case DataType::Int32: static_cast<std::int32_t*>(data)[i] = static_cast<std::int32_t>(v); break;
    case DataType::Int64: static_cast<std::int64_t*>(data)[i] = static_cast<std::int64_t>(v); break;
    case DataType::Float16: static_cast<std::uint16_t*>(data)[i] = float_to_fp16(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<std::uint16_t*>(data)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(data)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(data)[i] = v; break;
    case DataType::Bool: static_cast<std::uint8_t*>(data)[i] = v != 0.0; break;
  }
}

std::vector<std::byte> make_values(int rank, std::int64_t count, DataType dtype, int salt) {
  std::vector<std::byte> out(static_cast<std::size_t>(count) * element_size(dtype));
  for (std::int64_t i = 0; i < count; ++i) write_element(out.data(), dtype, i, value_at(rank, i, dtype, salt));
  return out;
}

namespace {

// Wraps an exact integer result into the dtype's range, as two's complement does.
double wrap(long long v, DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return static_cast<std::uint8_t>(static_cast<unsigned long long>(v));
    case DataType::Int8: return static_cast<std::int8_t>(static_cast<std::uint8_t>(static_cast<unsigned long long>(v)));
    case DataType::Int32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<unsigned long long>(v)));
    default: return static_cast<double>(v);
  }
}

}  // namespace

double expected_reduction(int size, std::int64_t index, DataType dtype, ReduceOp op, int salt) {
  double acc = value_at(0, index, dtype, salt);
  for (int r = 1; r < size; ++r) {
    double v = value_at(r, index, dtype, salt);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc += v; break;
      case ReduceOp::Min: acc = std::min(acc, v); break;
      case ReduceOp::Max: acc = std::max(acc, v); break;
      case ReduceOp::Product: acc *= v; break;
    }
  }
  if (dtype == DataType::Bool) return acc != 0.0 ? 1.0 : 0.0;
  if (!is_floating_point(dtype)) {
    double wrapped = wrap(static_cast<long long>(acc), dtype);
    if (op == ReduceOp::Average) return std::trunc(wrapped / size);
    return wrapped;
  }
  return op == ReduceOp::Average ? acc / size : acc;
}

double tolerance(DataType dtype, double reference) {
  double magnitude = std::max(1.0, std::fabs(reference));
  switch (dtype) {
    case DataType::Float16: return 2e-3 * magnitude;
    case DataType::BFloat16: return 1e-2 * magnitude;
    case DataType::Float32: return 1e-6 * magnitude;
    case DataType::Float64: return 1e-12 * magnitude;
    default: return 0.0;
  }
}

std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::uint64_t fnv1a(const std::string& text) { return fnv1a(text.data(), text.size()); }

}  // namespace kolo::testing
