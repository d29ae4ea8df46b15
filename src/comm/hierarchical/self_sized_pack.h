// Self-sized blocks (Communicator::allgather_self_sized) packed end to end, so
// that the hierarchical communicator moves a host's blocks, or the other hosts',
// as one message of the bytes they use rather than padded to the largest block.
//
// A pack is itself a self-sized block: [u32 pack bytes | block | block | ...],
// each block beginning with its own u32 length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo::comm::hierarchical {

// The largest pack of `blocks` blocks of at most `max_block` bytes each.
constexpr std::size_t max_pack_bytes(std::size_t blocks, std::size_t max_block) {
  return sizeof(std::uint32_t) + blocks * max_block;
}

// Packs blocks first..first+count-1 of `blocks` (block r at blocks + r * max_block,
// each of a valid length: the caller's own or checked on arrival) into `pack`.
void pack_blocks(const std::byte* blocks, int first, int count, std::size_t max_block, std::vector<std::byte>& pack);

// Unpacks a pack of `count` blocks from ranks first.. into blocks + r * max_block.
// Throws InvalidArgumentError, naming `sender`, when the pack is malformed: a
// block of a bad length, blocks past the pack's end, or bytes left over.
void unpack_blocks(const std::byte* pack, std::size_t max_pack, int first, int count, std::size_t max_block,
                   std::byte* blocks, int sender);

}  // namespace kolo::comm::hierarchical
