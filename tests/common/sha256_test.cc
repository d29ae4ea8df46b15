// SHA-256 against FIPS 180-2 examples and HMAC-SHA256 against RFC 4231.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/hmac.h"
#include "common/sha256.h"

namespace kolo::crypto {
namespace {

std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<std::uint8_t>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::vector<std::uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

TEST(Sha256, Fips180Examples) {
  EXPECT_EQ(to_hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(to_hex(sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, EmptyInput) {
  EXPECT_EQ(to_hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

// Lengths around the 55/56/64-byte padding boundaries, fed whole and byte by byte:
// incremental hashing must agree with one-shot hashing.
TEST(Sha256, IncrementalMatchesOneShotAcrossBlockBoundaries) {
  for (std::size_t len : {0u, 1u, 55u, 56u, 57u, 63u, 64u, 65u, 119u, 120u, 128u, 1000u}) {
    std::string data(len, '\0');
    for (std::size_t i = 0; i < len; ++i) data[i] = static_cast<char>(i * 7 + 3);
    Sha256 h;
    for (char c : data) h.update(std::string_view(&c, 1));
    EXPECT_EQ(to_hex(h.finish()), to_hex(sha256(data))) << "length " << len;
  }
  // 56 bytes forces the length into a second padding block; known answer:
  EXPECT_EQ(to_hex(sha256(std::string(56, 'a'))), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

struct HmacCase {
  std::string key_hex;
  std::string data;  // raw bytes
  std::string mac_hex;
};

TEST(HmacSha256, Rfc4231Vectors) {
  const std::vector<HmacCase> cases = {
      // Test case 1
      {std::string(40, '0').replace(0, 40, "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b"), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      // Test case 2: key shorter than the block
      {"4a656665", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      // Test case 3
      {std::string(40, 'a'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      // Test case 4
      {"0102030405060708090a0b0c0d0e0f10111213141516171819", std::string(50, '\xcd'),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      // Test case 6: key longer than the block is hashed first
      {std::string(262, 'a'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      // Test case 7
      {std::string(262, 'a'),
       "This is a test using a larger than block-size key and a larger than block-size data. The key needs to "
       "be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(to_hex(hmac_sha256(from_hex(c.key_hex), bytes_of(c.data))), c.mac_hex) << "key " << c.key_hex;
  }
}

TEST(HmacSha256, Rfc4231TruncatedVector) {
  // Test case 5: output truncated to 128 bits.
  auto mac = hmac_sha256(from_hex(std::string(40, '0').replace(0, 40, "0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c")),
                         bytes_of("Test With Truncation"));
  EXPECT_EQ(to_hex(std::span(mac).first(16)), "a3b6167473100ee06e0c796c2955552b");
}

TEST(ConstantTimeEqual, ComparesContentAndSize) {
  std::vector<std::uint8_t> a = {1, 2, 3}, b = {1, 2, 3}, c = {1, 2, 4}, d = {1, 2};
  EXPECT_TRUE(constant_time_equal(a, b));
  EXPECT_FALSE(constant_time_equal(a, c));
  EXPECT_FALSE(constant_time_equal(a, d));
  EXPECT_TRUE(constant_time_equal(std::span<const std::uint8_t>(), std::span<const std::uint8_t>()));
}

}  // namespace
}  // namespace kolo::crypto
