// The first step of the collectives that work in place of the ranks' buffers
// (shm_in_place.h): every rank publishes where its buffers lie in shareable
// memory (memory/shareable_memory.h: shareable kolo::Buffers are memfds), and maps
// its peers' (peer_mappings.h). Arriving at the step also says that the rank's
// input is ready and its output free for the peers to write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/shm/peer_mappings.h"
#include "comm/shm/shm_channel.h"

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
    bool operator==(const Published&) const = default;
  };

  // Publishes this rank's buffers and maps every peer's. `send_bytes`: how much
  // of every rank's send buffer the collective reads (0: the peers' send buffers
  // are not read, and not published); `recv_bytes` the same of the receive
  // buffers. `usable` is the caller's own condition (how its buffers overlap).
  // Returns true when every rank's buffers are shareable, usable and mapped by
  // every rank; false on every rank alike otherwise, nothing written. Every
  // rank calls it with the same byte counts.
  bool exchange(ShmChannel& channel, const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                bool usable);

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
  PeerMappings mappings_;
};

}  // namespace kolo::comm::shm
