// The collective algorithms of the shared-memory communicator, written as steps
// of a ShmChannel (the protocol is described at the top of shm_communicator.cc).
// Arguments have been checked by the caller; all ranks call the same functions
// with agreeing arguments, so all derive the same steps.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "comm/regions.h"
#include "comm/result_scale.h"
#include "comm/shm/shm_channel.h"
#include "kolo/types.h"

namespace kolo::comm::shm {

// `srcs` and `run_srcs` are scratch space for one input pointer per rank. A
// contiguous allreduce is a list of one region. `scale` is applied to each
// block of the sum where it is reduced.
void allreduce(ShmChannel& channel, const RegionList& regions, DataType dtype, ReduceOp op, const ResultScale& scale,
               std::span<const void*> srcs, std::span<const void*> run_srcs);
// `send`: the input as one index space (a contiguous input is one region); the
// output may be this rank's own block of a contiguous input, but no other part.
void reduce_scatter(ShmChannel& channel, const RegionList& send, std::byte* recv, std::span<const std::size_t> counts,
                    DataType dtype, ReduceOp op, std::span<const void*> srcs, std::span<const void*> run_srcs);

// root < 0: every rank receives (allgatherv); else only `root` (gatherv).
void gather(ShmChannel& channel, const std::byte* send, std::byte* recv, std::span<const std::size_t> sizes, int root);
// allgatherv into `recv`, bytes as one index space (recv sides of its regions);
// `send` may not overlap them.
void allgather_into(ShmChannel& channel, const std::byte* send, const RegionList& recv,
                    std::span<const std::size_t> sizes);
void broadcast(ShmChannel& channel, std::byte* buffer, std::size_t bytes, int root);
// Communicator::allgather_self_sized for blocks of up to one slot: a block of up
// to kSelfSizedFlaggedBytes in flagged lines (no more lines than it uses), a
// longer one through the slot, its first flagged line carrying the length.
// Past 4 lines, one flagged line then a copy of the slot is the faster: a
// reader waits on each flagged line in turn, but copies a slot in one sweep
// (2 ranks: a 1 KiB block costs the negotiation step 0.82 us through the slot
// and 1.05 in flagged lines; a 128-byte block is faster in flagged lines).
inline constexpr std::size_t kSelfSizedFlaggedBytes = 256;
void allgather_self_sized(ShmChannel& channel, const std::byte* send, std::byte* recv, std::size_t max_block);
void alltoallv(ShmChannel& channel, const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
               std::span<const std::size_t> recv_bytes);
void barrier(ShmChannel& channel);

// ---- helpers shared by the algorithms ------------------------------------------------

inline std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// [begin, end) of piece `index` when `len` elements are split into `parts`
// consecutive pieces whose boundaries are multiples of `align` (the last pieces
// may be shorter or empty).
struct Piece {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};
Piece piece_of(std::size_t len, int parts, int index, std::size_t align);

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes);
// offsets[i] = sum of sizes[0..i); offsets[size] = the total.
std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> sizes);
// The same into `offsets`, which keeps its capacity (for per-cycle callers).
void prefix_offsets(std::span<const std::size_t> sizes, std::vector<std::size_t>& offsets);
std::size_t max_of(std::span<const std::size_t> sizes);

}  // namespace kolo::comm::shm
