// A fast 64-bit digest of a buffer, for ranks that compare what they hold so
// that only what differs is sent. Equal bytes give equal digests; a change
// within one 8-byte word always changes the digest, and other changes do but
// for a chance of about 2^-64. Not for anything an adversary chooses.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kolo {

std::uint64_t digest_bytes(const void* data, std::size_t size);

}  // namespace kolo
