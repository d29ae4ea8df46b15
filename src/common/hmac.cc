#include "common/hmac.h"

#include <algorithm>

namespace kolo::crypto {

Sha256Digest hmac_sha256(std::span<const std::uint8_t> key, std::span<const std::uint8_t> message) {
  // Keys longer than a block are hashed first; shorter ones are zero-padded.
  std::array<std::uint8_t, Sha256::kBlockSize> block_key{};
  if (key.size() > Sha256::kBlockSize) {
    Sha256Digest hashed = sha256(key);
    std::copy(hashed.begin(), hashed.end(), block_key.begin());
  } else {
    std::copy(key.begin(), key.end(), block_key.begin());
  }

  std::array<std::uint8_t, Sha256::kBlockSize> inner_pad, outer_pad;
  for (std::size_t i = 0; i < Sha256::kBlockSize; ++i) {
    inner_pad[i] = block_key[i] ^ 0x36;
    outer_pad[i] = block_key[i] ^ 0x5c;
  }

  Sha256 inner;
  inner.update(inner_pad);
  inner.update(message);
  Sha256Digest inner_digest = inner.finish();

  Sha256 outer;
  outer.update(outer_pad);
  outer.update(inner_digest);
  return outer.finish();
}

bool constant_time_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  if (a.size() != b.size()) return false;
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<std::uint8_t>(a[i] ^ b[i]);
  // volatile keeps the compiler from turning the loop into an early-exit memcmp.
  volatile std::uint8_t result = diff;
  return result == 0;
}

}  // namespace kolo::crypto
