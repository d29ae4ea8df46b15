// Inputs with a known answer, and the check of every rank's output against it.
// Values are small integers, exact in every element type (sums of up to a few
// dozen ranks stay below 2^8, where bfloat16 stops being exact), and depend on the
// rank and the position, so a block landing in the wrong place is caught.
#pragma once

#include <cstddef>

#include "bench_options.h"
#include "size_plan.h"

namespace kolo::bench {

// Fills this rank's input for one size: `send` (which is `recv` for in-place
// allreduce and for broadcast; non-root ranks of a broadcast get poison).
void fill_input(const BenchOptions& options, const SizePoint& point, int rank, int nranks, void* send);

// Overwrites `count` elements with a value no correct result contains.
void poison(ElemType type, void* data, std::size_t count);

// How many of this rank's point.recv_count output elements are wrong.
std::size_t count_wrong(const BenchOptions& options, const SizePoint& point, int rank, int nranks,
                        const void* result);

}  // namespace kolo::bench
