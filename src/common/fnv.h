// FNV-1a, 64 bits: a cheap hash for names and summaries that ranks compare, not
// for anything an adversary chooses.
#pragma once

#include <cstdint>

namespace kolo {

class Fnv1a {
 public:
  // Adds the low `bytes` bytes of `value`, least significant first.
  void add(std::uint64_t value, int bytes = 8) {
    for (int i = 0; i < bytes; ++i) {
      hash_ ^= (value >> (8 * i)) & 0xffu;
      hash_ *= 1099511628211ull;
    }
  }
  std::uint64_t value() const { return hash_; }

 private:
  std::uint64_t hash_ = 14695981039346656037ull;
};

}  // namespace kolo
