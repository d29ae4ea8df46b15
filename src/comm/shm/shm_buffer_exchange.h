// The first step of the collectives that work in place of the ranks' buffers
// (shm_in_place.h): every rank publishes where its buffers lie in shareable
// memory, as the call's placement says (comm/placement.h; shareable
// kolo::Buffers are memfds: memory/shareable_memory.h), and maps its peers'
// (peer_mappings.h). Arriving at the step also says that the rank's input is
// ready and its output free for the peers to write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/shm/peer_mappings.h"
#include "comm/shm/shm_channel.h"
#include "memory/shareable_memory.h"

namespace kolo::comm::shm {

class BufferExchange {
 public:
  explicit BufferExchange(int size);

  // What a rank publishes (fixed layout: it crosses process boundaries). A file
  // of 0 bytes: nothing published.
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
    std::uint64_t layout;  // where in the files the call's buffers lie, as the caller sums it up
    bool operator==(const Published&) const = default;
  };

  // One of this rank's buffers: where, how much of it the collective uses on
  // every rank, and the shareable memory it lies in (null: plain memory).
  struct Local {
    const void* data;
    std::size_t bytes;
    const ShareableMemory* memory;
  };

  // Publishes this rank's buffers and maps every peer's. `send.bytes` 0: the
  // peers' send buffers are not read, and not published. `usable` is the
  // caller's own condition (how its buffers overlap). Returns true when every
  // rank's buffers lie in shareable memory, are usable and mapped by every
  // rank; false on every rank alike otherwise, nothing written. Every rank
  // calls it with the same byte counts. `layout`: a value every rank's call
  // must match (a summary of where in the files its buffers lie), else false.
  bool exchange(ShmChannel& channel, Local send, Local recv, bool usable, std::uint64_t layout = 0);

  // Rank j's buffers as this rank maps them (its own as given), after exchange()
  // returned true.
  std::byte* send_of(int rank) const { return sends_[static_cast<std::size_t>(rank)]; }
  std::byte* recv_of(int rank) const { return recvs_[static_cast<std::size_t>(rank)]; }

 private:
  bool map_peers(ShmChannel& channel);

  std::int32_t pid_;  // getpid() is a system call; a communicator never changes process
  std::vector<Published> table_, last_table_;
  bool last_mapped_ = false;
  std::vector<std::size_t> published_sizes_;
  std::vector<std::byte*> sends_, recvs_;
  std::vector<std::byte*> send_bases_, recv_bases_;  // where each peer's files are mapped (null: none)
  PeerMappings mappings_;
};

}  // namespace kolo::comm::shm
