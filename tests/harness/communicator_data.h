// Test data for the communicators' collectives, and the references they must
// match bit for bit.
//
// Reductions take random inputs (floats in [-2, 2), integers of random bits, bools
// 0 to 2), so that float results depend on the order of the reduction and a
// reference that reduces in another order would not match. Byte-level
// collectives move pattern_bytes, which differ by sender, receiver and position.
// Every rank can build every other rank's input, so references are computed
// locally on each rank. (values.h has the small exact values of the public-API
// suite, whose references do not depend on the order.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo::testing {

using Bytes = std::vector<std::uint8_t>;

// `count` elements of what `rank` contributes to case `seed`.
Bytes random_input(DataType dtype, std::size_t count, int rank, std::uint64_t seed);

// Where the ranks of a job run: `hosts` groups of `per_host` ranks, numbered host
// by host. A flat communicator is one host of all ranks.
struct HostShape {
  int per_host = 1;
  int hosts = 1;
  int ranks() const { return per_host * hosts; }
};

// The reduction of every rank's random_input with `op`, as the communicators
// compute it: each host's ranks in rank order (reduce_many), then the hosts' results
// in host order. With one host that is the order of the shared-memory
// communicator; a job of one rank gets its input back unchanged.
Bytes reference_reduction(DataType dtype, ReduceOp op, std::size_t count, HostShape shape, std::uint64_t seed);

// `n` bytes that rank `from` sends to rank `to` in a byte-level collective.
Bytes pattern_bytes(int from, int to, std::size_t n);

}  // namespace kolo::testing
