// ALLREDUCE IN PLACE OF THE RANKS' BUFFERS. When every rank's input and output
// lie in shareable memory (large kolo::Buffers: common/shareable_memory.h), each
// rank maps its peers' buffers (peer_mappings.h) and reduces its own piece of the
// elements from every rank's input straight into every rank's output: no slots,
// no copies in between, and only two synchronizations per call instead of
// three counters per slot-sized chunk. On rank r, for its piece:
//   1. every rank publishes where its buffers are (pid, memfd number, inode,
//      offset) in one flagged gather; arriving there also says its input is
//      ready and its output free. A rank whose buffers are not shareable (or
//      overlap other than exactly) says so, and all ranks return to the slot
//      path together;
//   2. map every peer's files (kept across calls); unless the table is the same
//      as the previous call's, whose mappings all ranks had, a one-byte gather
//      tells whether every rank mapped every peer (if not, the slot path);
//   3. reduce the piece in rank order (the same kernel and order as the slot
//      path, so the same bits) through a 16 KiB block that stays in L1, and
//      copy each block to the piece of every rank's output;
//   4. barrier: no rank returns while a peer still reads its input or writes
//      its output.
// Each rank reads its piece from n inputs and writes it to n outputs: 2x the
// buffer per rank whatever n, against ~3x its share plus the copies in and out
// of slots on the slot path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/shm/peer_mappings.h"
#include "comm/shm/shm_channel.h"
#include "kolo/types.h"

namespace kolo::comm::shm {

class MappedAllreduce {
 public:
  explicit MappedAllreduce(int size);

  // Runs the allreduce and returns true, or returns false on every rank alike,
  // having changed nothing, when some rank's buffers cannot take this path.
  // Every rank calls it for the same count and dtype.
  bool run(ShmChannel& channel, const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op);

  // What a rank publishes (fixed layout: it crosses process boundaries).
  struct File {
    std::int32_t fd;
    std::uint32_t unused;
    std::uint64_t inode, file_bytes, offset;
    bool operator==(const File&) const = default;
  };
  struct Published {
    std::int32_t pid;
    std::uint32_t usable;
    File send, recv;
    bool operator==(const Published&) const = default;
  };

 private:
  bool map_peers(ShmChannel& channel);

  std::int32_t pid_;  // getpid() is a system call; a communicator never changes process
  std::vector<Published> table_, last_table_;
  bool last_mapped_ = false;
  std::vector<std::size_t> published_sizes_;
  std::vector<std::byte*> sends_, recvs_;  // every rank's buffers as this rank maps them
  std::vector<const void*> block_srcs_;
  PeerMappings mappings_;
};

}  // namespace kolo::comm::shm
