// HMAC-SHA256 (RFC 2104), the proof a store client gives that it holds the job's
// secret, and a comparison that takes the same time wherever the inputs differ.
#pragma once

#include <cstdint>
#include <span>

#include "common/sha256.h"

namespace kolo::crypto {

Sha256Digest hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> message);

// Compares equal-sized buffers without an early exit, so that timing does not tell
// an attacker how many leading bytes of a forged MAC were right. Different sizes
// compare unequal.
bool constant_time_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);

}  // namespace kolo::crypto
