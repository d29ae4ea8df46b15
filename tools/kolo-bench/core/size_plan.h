// Which sizes a sweep visits and the buffers each needs. "Size" is nccl-tests'
// size: the bytes of the whole vector (allreduce/broadcast: the buffer; allgather:
// the gathered output; reducescatter: the input; alltoall: what one rank sends).
#pragma once

#include <cstddef>
#include <vector>

#include "bench_options.h"

namespace kolo::bench {

struct SizePoint {
  std::size_t bytes = 0;
  std::size_t send_count = 0;   // elements in this rank's input
  std::size_t recv_count = 0;   // elements in this rank's output
  std::size_t block_count = 0;  // elements one rank contributes or receives per peer block
  int warmup = 0;
  int iters = 0;
};

// Sizes from min_bytes to max_bytes growing by step_factor, each rounded down to a
// whole number of elements (and of per-rank blocks where the op splits the vector),
// at least one element per block; sizes that round to the same bytes appear once.
// options.sizes, when given, replaces the geometric sweep.
std::vector<SizePoint> plan_sizes(const BenchOptions& options, int nranks);

}  // namespace kolo::bench
