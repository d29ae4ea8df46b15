#include "common/digest.h"

#include <cstring>

namespace kolo {
namespace {

// Odd constants with well-mixed bits: multiplying by one is a bijection of the
// 64-bit words.
constexpr std::uint64_t kMulA = 0x9e3779b97f4a7c15ull;
constexpr std::uint64_t kMulB = 0xc2b2ae3d27d4eb4full;
constexpr std::uint64_t kMulC = 0x165667b19e3779f9ull;

std::uint64_t rotate_left(std::uint64_t x, int bits) { return (x << bits) | (x >> (64 - bits)); }

std::uint64_t load_word(const unsigned char* at) {
  std::uint64_t word;
  std::memcpy(&word, at, sizeof word);
  return word;
}

// For a fixed `state` a bijection of `word`, and for a fixed `word` one of
// `state`: a difference in one word survives every later step.
std::uint64_t absorb(std::uint64_t state, std::uint64_t word) { return rotate_left(state + word * kMulB, 31) * kMulA; }

// Spreads every bit of the result over all of them (a bijection too).
std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

}  // namespace

std::uint64_t digest_bytes(const void* data, std::size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  // Four independent lanes over 32-byte blocks keep the multiplier busy: the
  // loop runs at about memory speed.
  std::uint64_t lanes[4] = {kMulA, kMulB, kMulC, ~kMulA};
  std::size_t at = 0;
  for (; at + 32 <= size; at += 32) {
    for (int lane = 0; lane < 4; ++lane) lanes[lane] = absorb(lanes[lane], load_word(bytes + at + 8 * lane));
  }
  std::uint64_t h = absorb(kMulC, size);
  for (std::uint64_t lane : lanes) h = absorb(h, lane);
  for (; at + 8 <= size; at += 8) h = absorb(h, load_word(bytes + at));
  if (at < size) {
    std::uint64_t last = 0;  // the size, absorbed above, tells trailing zeros apart
    std::memcpy(&last, bytes + at, size - at);
    h = absorb(h, last);
  }
  return avalanche(h);
}

}  // namespace kolo
