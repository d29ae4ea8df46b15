// Checks, from inside a rank, that every rank of a communicator holds the same
// value, through that communicator (agreement.h does it through kolo's API).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/values.h"

namespace kolo::testing {

inline void expect_same_on_every_rank(comm::Communicator& comm, std::uint64_t value, const std::string& what) {
  const int n = comm.size();
  std::vector<std::uint64_t> all(n);
  std::vector<std::size_t> sizes(n, sizeof value);
  comm.allgatherv(&value, sizeof value, all.data(), sizes);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], value) << what << ": rank " << r << " holds other bits";
}

// The bytes are identical on every rank.
inline void expect_bitwise_equal_on_every_rank(comm::Communicator& comm, const void* data, std::size_t bytes,
                                               const std::string& what) {
  expect_same_on_every_rank(comm, fnv1a(data, bytes), what);
}

}  // namespace kolo::testing
