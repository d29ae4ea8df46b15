// Deterministic test data and references for every dtype.
//
// Values are small integers (0..8 for uint8, -4..4 otherwise, 0/1 for bool) so
// that sums, minima, maxima and products of up to four ranks are exact even in
// float16 and bfloat16, and every reference can be computed in double.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo::testing {

double value_at(int rank, std::int64_t index, DataType dtype, int salt);
double read_element(const void* data, DataType dtype, std::int64_t index);
void write_element(void* data, DataType dtype, std::int64_t index, double value);

// A buffer of `count` elements filled with value_at(rank, i, dtype, salt).
std::vector<std::byte> make_values(int rank, std::int64_t count, DataType dtype, int salt);

// What allreduce with `op` over `size` ranks must give at `index`, as the dtype
// would hold it (integers wrap, average truncates on integers).
double expected_reduction(int size, std::int64_t index, DataType dtype, ReduceOp op, int salt);

// Tolerance for comparing a computed element with its reference.
double tolerance(DataType dtype, double reference);

std::uint64_t fnv1a(const void* data, std::size_t bytes);
std::uint64_t fnv1a(const std::string& text);

}  // namespace kolo::testing
