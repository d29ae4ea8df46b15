// Checks, from inside a rank, that every rank of the job holds the same value.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "harness/values.h"
#include "kolo/kolo.h"

namespace kolo::testing {

// Gathers `value` from every rank (through kolo itself) and expects all equal.
inline void expect_same_everywhere(std::uint64_t value, const std::string& what) {
  std::int64_t mine = static_cast<std::int64_t>(value);
  Buffer all = kolo::allgather(make_tensor(&mine, 1), {.name = "agree:" + what});
  for (int r = 0; r < kolo::size(); ++r)
    EXPECT_EQ(all.as<std::int64_t>()[r], mine) << what << " differs between rank " << r << " and rank " << kolo::rank();
}

// The bytes of a tensor are identical on every rank.
inline void expect_bitwise_equal_everywhere(const void* data, std::size_t bytes, const std::string& what) {
  expect_same_everywhere(fnv1a(data, bytes), what);
}

}  // namespace kolo::testing
