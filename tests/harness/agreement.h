// Checks, from inside a rank, that every rank of the job holds the same value.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "harness/collective_suite.h"
#include "harness/values.h"
#include "kolo/kolo.h"

namespace kolo::testing {

// Gathers `value` from every rank (through kolo itself) and expects all equal.
inline void expect_same_everywhere(std::uint64_t value, const std::string& what) {
  for (const auto& problem : differences_between_ranks(value, what)) ADD_FAILURE() << problem;
}

// The bytes of a tensor are identical on every rank.
inline void expect_bitwise_equal_everywhere(const void* data, std::size_t bytes, const std::string& what) {
  expect_same_everywhere(fnv1a(data, bytes), what);
}

}  // namespace kolo::testing
