#include "comm/ps/ps_protocol.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kolo/error.h"

namespace kolo::comm::ps {
namespace {

constexpr std::uint32_t kMagic = 0x53504b4f;  // "OKPS"

template <typename T>
void put(EncodedHeader& out, std::size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}

template <typename T>
T get(const EncodedHeader& in, std::size_t at) {
  T value;
  std::memcpy(&value, in.data() + at, sizeof value);
  return value;
}

// splitmix64's finalizer: consecutive calls land on unrelated servers.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

std::string PushHeader::describe() const {
  if (kind == Kind::Bye) return "bye";
  std::string text = "push of allreduce " + std::to_string(call) + ", partition " + std::to_string(partition) + ": " +
                     std::to_string(count) + " " + to_string(dtype) + " (" + to_string(op);
  if (scale.divisor() != 1) text += ", divided by " + std::to_string(scale.divisor());
  else if (!scale.is_identity()) text += ", times " + std::to_string(scale.factor());
  return text + ")";
}

// Layout: magic u32 | kind u8 | dtype u8 | op u8 | 0 u8 | call u64 | partition u32 | 0 u32 | count u64 |
//         scale factor f64 | scale divisor i64
EncodedHeader encode(const PushHeader& h) {
  EncodedHeader out{};
  put(out, 0, kMagic);
  out[4] = static_cast<std::uint8_t>(h.kind);
  out[5] = static_cast<std::uint8_t>(h.dtype);
  out[6] = static_cast<std::uint8_t>(h.op);
  put(out, 8, h.call);
  put(out, 16, h.partition);
  put(out, 24, h.count);
  put(out, 32, h.scale.factor());
  put(out, 40, h.scale.divisor());
  return out;
}

PushHeader decode(const EncodedHeader& in) {
  if (get<std::uint32_t>(in, 0) != kMagic) throw InvalidArgumentError("it is no push header (wrong magic word)");
  PushHeader h;
  h.kind = static_cast<Kind>(in[4]);
  if (h.kind == Kind::Bye) return h;
  if (h.kind != Kind::Push) throw InvalidArgumentError("unknown message kind " + std::to_string(in[4]));
  h.dtype = static_cast<DataType>(in[5]);
  h.op = static_cast<ReduceOp>(in[6]);
  if (!is_valid(h.dtype)) throw InvalidArgumentError("unknown dtype " + std::to_string(in[5]));
  if (!is_valid(h.op) || h.op == ReduceOp::Average)
    throw InvalidArgumentError("reduce op " + std::to_string(in[6]) + " is none a server applies");
  h.call = get<std::uint64_t>(in, 8);
  h.partition = get<std::uint32_t>(in, 16);
  h.count = get<std::uint64_t>(in, 24);
  const auto factor = get<double>(in, 32);
  const auto divisor = get<std::int64_t>(in, 40);
  if (!std::isfinite(factor) || divisor < 1 || (divisor != 1 && factor != 1.0))
    throw InvalidArgumentError("scale (factor " + std::to_string(factor) + ", divisor " + std::to_string(divisor) +
                               ") is none a server applies");
  h.scale = divisor != 1 ? ResultScale::divide(divisor) : ResultScale::multiply(factor);
  if (h.count > kMaxPushBytes / element_size(h.dtype))
    throw InvalidArgumentError(std::to_string(h.count) + " elements of " + to_string(h.dtype) + " exceed the " +
                               std::to_string(kMaxPushBytes) + " bytes a push may carry");
  return h;
}

std::size_t PartitionPlan::elements_per_partition(DataType dtype) const {
  return std::max<std::size_t>(1, partition_bytes / element_size(dtype));
}

int PartitionPlan::owner(std::uint64_t call, std::uint32_t partition) const {
  const auto k = static_cast<std::uint64_t>(servers);
  return static_cast<int>((mix(call) % k + partition) % k);
}

}  // namespace kolo::comm::ps
