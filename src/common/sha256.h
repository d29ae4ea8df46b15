// SHA-256 (FIPS 180-4), implemented here so that kolo needs no crypto library just
// to authenticate store connections.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kolo::crypto {

using Sha256Digest = std::array<std::uint8_t, 32>;

// Incremental hashing: update() any number of times, then finish() once.
class Sha256 {
 public:
  static constexpr std::size_t kBlockSize = 64;

  Sha256();
  void update(std::span<const std::uint8_t> data);
  void update(std::string_view data);
  Sha256Digest finish();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, kBlockSize> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::span<const std::uint8_t> data);
Sha256Digest sha256(std::string_view data);

// Lower-case hex, for tests and diagnostics.
std::string to_hex(std::span<const std::uint8_t> data);

}  // namespace kolo::crypto
