#include "comm/hierarchical/self_sized_pack.h"

#include <cstring>
#include <string>

#include "comm/communicator.h"
#include "kolo/error.h"

namespace kolo::comm::hierarchical {

void pack_blocks(const std::byte* blocks, int first, int count, std::size_t max_block, std::vector<std::byte>& pack) {
  pack.resize(max_pack_bytes(static_cast<std::size_t>(count), max_block));
  std::size_t used = sizeof(std::uint32_t);
  for (int r = first; r < first + count; ++r) {
    const std::byte* block = blocks + static_cast<std::size_t>(r) * max_block;
    std::uint32_t length;
    std::memcpy(&length, block, sizeof length);
    std::memcpy(pack.data() + used, block, length);
    used += length;
  }
  const auto total = static_cast<std::uint32_t>(used);
  std::memcpy(pack.data(), &total, sizeof total);
}

void unpack_blocks(const std::byte* pack, std::size_t max_pack, int first, int count, std::size_t max_block,
                   std::byte* blocks, int sender) {
  const std::uint32_t total = self_sized_length(pack, max_pack, sender);
  auto malformed = [&](const std::string& why) {
    return InvalidArgumentError("rank " + std::to_string(sender) + " sent a malformed pack of blocks: " + why);
  };
  std::size_t at = sizeof(std::uint32_t);
  for (int r = first; r < first + count; ++r) {
    if (total - at < sizeof(std::uint32_t))
      throw malformed("it ends before the block of rank " + std::to_string(r));
    const std::uint32_t length = self_sized_length(pack + at, max_block, r);
    if (length > total - at) throw malformed("the block of rank " + std::to_string(r) + " runs past its end");
    std::memcpy(blocks + static_cast<std::size_t>(r) * max_block, pack + at, length);
    at += length;
  }
  if (at != total) throw malformed(std::to_string(total - at) + " bytes follow the last block");
}

}  // namespace kolo::comm::hierarchical
