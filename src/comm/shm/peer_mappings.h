// The peers' shareable memory (memory/shareable_memory.h) mapped into this
// process, kept across calls: opening /proc/<pid>/fd/<n> and mapping costs tens
// of microseconds and the first touch of every page a fault, and training
// reduces the same buffers step after step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo::comm::shm {

class PeerMappings {
 public:
  PeerMappings() = default;
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  // The whole of `peer`'s file (descriptor `fd` in process `pid`, inode `inode`,
  // `file_bytes` long), mapped read-write; nullptr when it cannot be: the process
  // is gone, this process may not open its descriptors (the same check as
  // ptrace's), or the descriptor now names another file or a shorter one.
  std::byte* map(int peer, int pid, int fd, std::uint64_t inode, std::uint64_t file_bytes);

  // Starts a call: map() marks what it uses for this call, and trim() keeps
  // whatever this call uses.
  void begin_call() { ++calls_; }
  // A mapping keeps the peer's memory alive after the peer frees it, so beyond
  // `keep_bytes` (or twice what this call uses, if more) of mapped files the
  // least recently used that this call does not use are unmapped (and beyond
  // kMaxEntries files).
  void trim(std::uint64_t keep_bytes);

  std::size_t mapped_files() const { return entries_.size(); }
  std::uint64_t mapped_bytes() const { return mapped_bytes_; }

 private:
  struct Entry {
    int peer, pid, fd;
    std::uint64_t inode, bytes;
    std::byte* base;
    std::uint64_t last_call;
  };
  static constexpr std::size_t kMaxEntries = 64;
  void drop(std::size_t index) noexcept;

  std::vector<Entry> entries_;
  std::uint64_t calls_ = 0;
  std::uint64_t mapped_bytes_ = 0;
};

}  // namespace kolo::comm::shm
