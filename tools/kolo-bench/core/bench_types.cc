#include "bench_types.h"

#include <array>
#include <utility>

namespace kolo::bench {
namespace {

template <typename E, std::size_t N>
E parse_name(const std::array<std::pair<const char*, E>, N>& names, const std::string& text, const char* what) {
  std::string known;
  for (const auto& [name, value] : names) {
    if (text == name) return value;
    known += (known.empty() ? "" : ", ") + std::string(name);
  }
  throw UsageError("unknown " + std::string(what) + " '" + text + "'; expected one of: " + known);
}

template <typename E, std::size_t N>
const char* name_of(const std::array<std::pair<const char*, E>, N>& names, E value) {
  for (const auto& [name, v] : names)
    if (v == value) return name;
  return "?";
}

constexpr std::array<std::pair<const char*, Collective>, 5> kCollectives{{
    {"allreduce", Collective::Allreduce},
    {"allgather", Collective::Allgather},
    {"broadcast", Collective::Broadcast},
    {"alltoall", Collective::Alltoall},
    {"reducescatter", Collective::Reducescatter},
}};

constexpr std::array<std::pair<const char*, ElemType>, 8> kTypes{{
    {"float32", ElemType::Float32},
    {"float64", ElemType::Float64},
    {"float16", ElemType::Float16},
    {"bfloat16", ElemType::BFloat16},
    {"int32", ElemType::Int32},
    {"int64", ElemType::Int64},
    {"int8", ElemType::Int8},
    {"uint8", ElemType::UInt8},
}};

constexpr std::array<std::pair<const char*, ReduceKind>, 4> kReductions{{
    {"sum", ReduceKind::Sum},
    {"avg", ReduceKind::Average},
    {"min", ReduceKind::Min},
    {"max", ReduceKind::Max},
}};

}  // namespace

const char* to_string(Collective c) { return name_of(kCollectives, c); }
const char* to_string(ElemType t) { return name_of(kTypes, t); }
const char* to_string(ReduceKind r) { return name_of(kReductions, r); }
Collective parse_collective(const std::string& text) { return parse_name(kCollectives, text, "collective"); }
ElemType parse_elem_type(const std::string& text) { return parse_name(kTypes, text, "data type"); }
ReduceKind parse_reduce_kind(const std::string& text) { return parse_name(kReductions, text, "reduction"); }

std::size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::Float64:
    case ElemType::Int64: return 8;
    case ElemType::Float32:
    case ElemType::Int32: return 4;
    case ElemType::Float16:
    case ElemType::BFloat16: return 2;
    case ElemType::Int8:
    case ElemType::UInt8: return 1;
  }
  return 1;
}

bool is_reduction(Collective c) { return c == Collective::Allreduce || c == Collective::Reducescatter; }

double bus_factor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::Allreduce: return 2.0 * (n - 1) / n;
    case Collective::Allgather:
    case Collective::Reducescatter:
    case Collective::Alltoall: return (n - 1) / n;
    case Collective::Broadcast: return 1.0;
  }
  return 1.0;
}

}  // namespace kolo::bench
