#include "pattern.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/half.h"

namespace kolo::bench {
namespace {

// Stores `value` as the element type does: integers wrap, floats round.
void store(ElemType t, void* base, std::size_t i, double value) {
  auto as_int = static_cast<std::int64_t>(std::trunc(value));
  switch (t) {
    case ElemType::Float32: static_cast<float*>(base)[i] = static_cast<float>(value); break;
    case ElemType::Float64: static_cast<double*>(base)[i] = value; break;
    case ElemType::Float16: static_cast<std::uint16_t*>(base)[i] = float_to_fp16(static_cast<float>(value)); break;
    case ElemType::BFloat16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16(static_cast<float>(value)); break;
    case ElemType::Int32: static_cast<std::int32_t*>(base)[i] = static_cast<std::int32_t>(as_int); break;
    case ElemType::Int64: static_cast<std::int64_t*>(base)[i] = as_int; break;
    case ElemType::Int8: static_cast<std::int8_t*>(base)[i] = static_cast<std::int8_t>(as_int); break;
    case ElemType::UInt8: static_cast<std::uint8_t*>(base)[i] = static_cast<std::uint8_t>(as_int); break;
  }
}

double load(ElemType t, const void* base, std::size_t i) {
  switch (t) {
    case ElemType::Float32: return static_cast<const float*>(base)[i];
    case ElemType::Float64: return static_cast<const double*>(base)[i];
    case ElemType::Float16: return fp16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case ElemType::BFloat16: return bf16_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case ElemType::Int32: return static_cast<const std::int32_t*>(base)[i];
    case ElemType::Int64: return static_cast<double>(static_cast<const std::int64_t*>(base)[i]);
    case ElemType::Int8: return static_cast<const std::int8_t*>(base)[i];
    case ElemType::UInt8: return static_cast<const std::uint8_t*>(base)[i];
  }
  return 0;
}

// What `value` reads back as after a store (rounding, wrapping).
double as_stored(ElemType t, double value) {
  alignas(8) unsigned char slot[8];
  store(t, slot, 0, value);
  return load(t, slot, 0);
}

bool is_float(ElemType t) {
  return t == ElemType::Float32 || t == ElemType::Float64 || t == ElemType::Float16 || t == ElemType::BFloat16;
}

// Input of the reductions: element i of rank r.
double reduce_input(int r, std::size_t i) { return ((r % 4) + 1) * static_cast<double>((i % 5) + 1); }

// Input of the data movements: element i of rank r, distinct across nearby ranks
// and positions.
double move_input(int r, std::size_t i) { return static_cast<double>((r * 37 + i * 11) % 100 + 1); }

double reduced(ReduceKind kind, int nranks, std::size_t i) {
  double sum = 0, lo = reduce_input(0, i), hi = lo;
  for (int r = 0; r < nranks; ++r) {
    const double v = reduce_input(r, i);
    sum += v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  switch (kind) {
    case ReduceKind::Sum: return sum;
    case ReduceKind::Average: return sum / nranks;
    case ReduceKind::Min: return lo;
    case ReduceKind::Max: return hi;
  }
  return sum;
}

double expected(const BenchOptions& o, const SizePoint& p, int rank, int nranks, std::size_t i) {
  const std::size_t block = p.block_count;
  switch (o.collective) {
    case Collective::Allreduce: return reduced(o.reduce, nranks, i);
    case Collective::Reducescatter: return reduced(o.reduce, nranks, static_cast<std::size_t>(rank) * block + i);
    case Collective::Allgather: return move_input(static_cast<int>(i / block), i % block);
    case Collective::Alltoall:
      return move_input(static_cast<int>(i / block), static_cast<std::size_t>(rank) * block + i % block);
    case Collective::Broadcast: return move_input(o.root, i);
  }
  return 0;
}

double tolerance(const BenchOptions& o, double want) {
  // Only a float average can round; integer sums, min and max are exact.
  if (o.reduce != ReduceKind::Average || !is_float(o.type)) return 0;
  const double rel = o.type == ElemType::Float64 ? 1e-12 : o.type == ElemType::Float32 ? 1e-6 : 1e-2;
  return std::abs(want) * rel;
}

}  // namespace

void poison(ElemType type, void* data, std::size_t count) {
  if (is_float(type)) {
    for (std::size_t i = 0; i < count; ++i) store(type, data, i, -12345.0);
  } else {
    std::memset(data, 0xff, count * elem_size(type));  // -1, or the largest unsigned value
  }
}

void fill_input(const BenchOptions& o, const SizePoint& p, int rank, int nranks, void* send) {
  (void)nranks;
  if (o.collective == Collective::Broadcast && rank != o.root) {
    poison(o.type, send, p.send_count);
    return;
  }
  const bool reduction = is_reduction(o.collective);
  for (std::size_t i = 0; i < p.send_count; ++i)
    store(o.type, send, i, reduction ? reduce_input(rank, i) : move_input(rank, i));
}

std::size_t count_wrong(const BenchOptions& o, const SizePoint& p, int rank, int nranks, const void* result) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < p.recv_count; ++i) {
    double want = expected(o, p, rank, nranks, i);
    if (o.reduce == ReduceKind::Average && !is_float(o.type)) want = std::trunc(want);
    want = as_stored(o.type, want);
    const double got = load(o.type, result, i);
    if (!(std::abs(got - want) <= tolerance(o, want))) ++wrong;
  }
  return wrong;
}

}  // namespace kolo::bench
