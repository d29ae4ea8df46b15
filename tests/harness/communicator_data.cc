#include "harness/communicator_data.h"

#include <cstring>

#include "common/half.h"
#include "common/reduce.h"

namespace kolo::testing {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Bytes reduce_in_order(const std::vector<Bytes>& inputs, DataType dtype, ReduceOp op, std::size_t count) {
  std::vector<const void*> ptrs;
  for (const auto& in : inputs) ptrs.push_back(in.data());
  Bytes out(count * element_size(dtype));
  if (count > 0) reduce_many(out.data(), ptrs.data(), static_cast<int>(ptrs.size()), count, dtype, op);
  return out;
}

}  // namespace

// One hash per element (no generator state), so that a 1 MiB input costs little.
Bytes random_input(DataType dtype, std::size_t count, int rank, std::uint64_t seed) {
  const std::size_t es = element_size(dtype);
  Bytes b(count * es);
  const std::uint64_t base = splitmix64(seed * 1000003 + static_cast<std::uint64_t>(rank));
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = splitmix64(base + i);
    const float real = static_cast<float>(h >> 40) * (4.0f / 16777216.0f) - 2.0f;  // [-2, 2)
    std::uint8_t* out = &b[i * es];
    switch (dtype) {
      case DataType::Float32: std::memcpy(out, &real, 4); break;
      case DataType::Float64: {
        const double v = real * 1.0000001;
        std::memcpy(out, &v, 8);
        break;
      }
      case DataType::Float16:
      case DataType::BFloat16: {
        const std::uint16_t v = dtype == DataType::Float16 ? float_to_fp16(real) : float_to_bf16(real);
        std::memcpy(out, &v, 2);
        break;
      }
      case DataType::Bool: *out = static_cast<std::uint8_t>(h % 3); break;
      default: std::memcpy(out, &h, es);
    }
  }
  return b;
}

Bytes reference_reduction(DataType dtype, ReduceOp op, std::size_t count, HostShape shape, std::uint64_t seed) {
  // A job of one copies its input (reduce_many would make its bools 0 or 1).
  if (shape.ranks() == 1) return random_input(dtype, count, 0, seed);
  std::vector<Bytes> host_results;
  for (int h = 0; h < shape.hosts; ++h) {
    std::vector<Bytes> inputs;
    for (int l = 0; l < shape.per_host; ++l) inputs.push_back(random_input(dtype, count, h * shape.per_host + l, seed));
    host_results.push_back(reduce_in_order(inputs, dtype, op, count));
  }
  if (shape.hosts == 1) return std::move(host_results.front());
  return reduce_in_order(host_results, dtype, op, count);
}

Bytes pattern_bytes(int from, int to, std::size_t n) {
  Bytes b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::uint8_t>(from * 131 + to * 31 + k * 7 + (k >> 9));
  return b;
}

}  // namespace kolo::testing
