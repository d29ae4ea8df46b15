// The vocabulary shared by kolo-bench and the peer benchmarks (bench/): which
// collective, which element type, which reduction, and the nccl-tests bus factor.
// Nothing here depends on kolo, MPI or Gloo, so every program reports alike.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace kolo::bench {

// Bad command line or an unsupported combination; the message says what to change.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Collective { Allreduce, Allgather, Broadcast, Alltoall, Reducescatter };
enum class ElemType { Float32, Float64, Float16, BFloat16, Int32, Int64, Int8, UInt8 };
enum class ReduceKind { Sum, Average, Min, Max };

const char* to_string(Collective c);
const char* to_string(ElemType t);
const char* to_string(ReduceKind r);
Collective parse_collective(const std::string& text);
ElemType parse_elem_type(const std::string& text);
ReduceKind parse_reduce_kind(const std::string& text);

std::size_t elem_size(ElemType t);
bool is_reduction(Collective c);

// busbw = algbw * bus_factor: the fraction of the data every rank must move in an
// optimal algorithm, so that busbw is comparable with a link's bandwidth whatever
// the number of ranks (nccl-tests' PERFORMANCE.md convention).
double bus_factor(Collective c, int nranks);

}  // namespace kolo::bench
