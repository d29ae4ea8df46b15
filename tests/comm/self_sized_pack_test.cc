// The packs of self-sized blocks the hierarchical communicator moves between
// hosts (comm/hierarchical/self_sized_pack.h): what arrives from another host
// is checked block by block before it is copied, so a malformed pack is a clear
// error naming its sender, never a read past its end.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "comm/hierarchical/self_sized_pack.h"
#include "kolo/error.h"

namespace kolo::comm::hierarchical {
namespace {

constexpr std::size_t kMaxBlock = 64;

// Blocks of ranks 0..n-1, block r of length 4 + 7r (each at r * kMaxBlock).
std::vector<std::byte> blocks_of(int n) {
  std::vector<std::byte> blocks(static_cast<std::size_t>(n) * kMaxBlock, std::byte{0xcd});
  for (int r = 0; r < n; ++r) {
    std::byte* block = blocks.data() + static_cast<std::size_t>(r) * kMaxBlock;
    const std::uint32_t length = 4 + 7 * static_cast<std::uint32_t>(r);
    std::memcpy(block, &length, sizeof length);
    for (std::uint32_t i = 4; i < length; ++i) block[i] = static_cast<std::byte>(r * 31 + i);
  }
  return blocks;
}

std::uint32_t total_of(const std::vector<std::byte>& pack) {
  std::uint32_t total;
  std::memcpy(&total, pack.data(), sizeof total);
  return total;
}

void set_total(std::vector<std::byte>& pack, std::uint32_t total) { std::memcpy(pack.data(), &total, sizeof total); }

std::string unpack_error(const std::vector<std::byte>& pack, int first, int count) {
  std::vector<std::byte> out(static_cast<std::size_t>(first + count) * kMaxBlock);
  try {
    unpack_blocks(pack.data(), pack.size(), first, count, kMaxBlock, out.data(), 5);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

TEST(SelfSizedPack, BlocksArriveWhereTheyBelongWithOnlyTheirOwnBytes) {
  const auto blocks = blocks_of(6);
  std::vector<std::byte> pack;
  pack_blocks(blocks.data(), 2, 3, kMaxBlock, pack);  // ranks 2, 3, 4
  EXPECT_EQ(pack.size(), max_pack_bytes(3, kMaxBlock));
  EXPECT_EQ(total_of(pack), 4u + 18 + 25 + 32);
  std::vector<std::byte> out(6 * kMaxBlock, std::byte{0xee});
  unpack_blocks(pack.data(), pack.size(), 2, 3, kMaxBlock, out.data(), 1);
  for (int r = 0; r < 6; ++r) {
    const std::size_t at = static_cast<std::size_t>(r) * kMaxBlock, length = 4 + 7 * static_cast<std::size_t>(r);
    for (std::size_t i = 0; i < length; ++i) {
      const std::byte want = r >= 2 && r <= 4 ? blocks[at + i] : std::byte{0xee};
      ASSERT_EQ(out[at + i], want) << "rank " << r << " byte " << i;
    }
  }
}

TEST(SelfSizedPack, AMalformedPackIsAnErrorNamingItsSender) {
  const auto blocks = blocks_of(3);
  std::vector<std::byte> pack;
  pack_blocks(blocks.data(), 0, 3, kMaxBlock, pack);
  const std::uint32_t total = total_of(pack);

  auto short_total = pack;  // ends inside the last block
  set_total(short_total, total - 1);
  EXPECT_NE(unpack_error(short_total, 0, 3).find("rank 5 sent a malformed pack of blocks: the block of rank 2 runs"),
            std::string::npos);

  auto long_total = pack;  // bytes after the last block
  set_total(long_total, total + 3);
  EXPECT_NE(unpack_error(long_total, 0, 3).find("3 bytes follow the last block"), std::string::npos);

  auto missing = pack;  // too short for the third block's length
  set_total(missing, 4 + 4 + 11 + 2);
  EXPECT_NE(unpack_error(missing, 0, 3).find("it ends before the block of rank 2"), std::string::npos);

  auto bad_block = pack;  // rank 1's block claims more than a block may hold
  const std::uint32_t huge = kMaxBlock + 1;
  std::memcpy(bad_block.data() + 4 + 4, &huge, sizeof huge);
  EXPECT_NE(unpack_error(bad_block, 0, 3).find("rank 1 declares a block of 65 bytes"), std::string::npos);

  auto beyond = pack;  // a total past the pack's room
  set_total(beyond, static_cast<std::uint32_t>(pack.size() + 1));
  EXPECT_NE(unpack_error(beyond, 0, 3).find("rank 5 declares a block of"), std::string::npos);
}

// Whatever the bytes, unpacking reads nothing past the pack's room and either
// fills the blocks or says why not.
TEST(SelfSizedPack, GarbageNeverReadsPastThePack) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 20000; ++trial) {
    const int count = 1 + trial % 4;
    std::vector<std::byte> pack(max_pack_bytes(static_cast<std::size_t>(count), kMaxBlock));
    for (auto& b : pack) b = static_cast<std::byte>(random() % (trial % 3 == 0 ? 256 : 40));
    if (trial % 2 == 0) set_total(pack, static_cast<std::uint32_t>(4 + random() % (pack.size() - 3)));
    std::vector<std::byte> out(static_cast<std::size_t>(count) * kMaxBlock);
    try {
      unpack_blocks(pack.data(), pack.size(), 0, count, kMaxBlock, out.data(), 0);
    } catch (const InvalidArgumentError&) {
    }
  }
}

}  // namespace
}  // namespace kolo::comm::hierarchical
