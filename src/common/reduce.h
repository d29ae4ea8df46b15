// Type-erased reduction and scaling kernels, shared by every communicator and the
// engine so that all of them compute bit-identical results.
#pragma once

#include <cstddef>

#include "kolo/types.h"

namespace kolo {

// dst[i] = dst[i] op src[i]. `op` is Sum, Min, Max or Product (never Average).
void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op);

// dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[n-1][i], combined left to right.
// Float16/BFloat16 accumulate in float32 and round once. dst may equal srcs[0].
void reduce_many(void* dst, const void* const* srcs, int n, std::size_t count, DataType dtype, ReduceOp op);

// data[i] *= factor for floating-point types (computed in double for Float64,
// float otherwise). Integer and Bool types are rejected by the caller before this.
void scale(void* data, std::size_t count, DataType dtype, double factor);

// data[i] /= divisor for integer types (truncating), used by Average on integers.
void divide_integer(void* data, std::size_t count, DataType dtype, std::int64_t divisor);

}  // namespace kolo
