// Large Buffers' memory (kolo/types.h, memory/buffer.cc), kept after release for
// the next Buffer of the same size. A fresh mapping costs a page fault and the
// kernel zeroing each of its pages on first touch, which for a large allgather
// output is a cost of the same order as the collective itself, paid again every
// call. Reusing the last call's mapping costs none, as PyTorch's caching
// allocator does for GPU memory.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "memory/shareable_memory.h"

namespace kolo::detail {

class MappingCache {
 public:
  // Keeps at most `limit_bytes` of released mappings; 0 keeps none.
  explicit MappingCache(std::size_t limit_bytes) : limit_(limit_bytes) {}
  ~MappingCache();
  MappingCache(const MappingCache&) = delete;
  MappingCache& operator=(const MappingCache&) = delete;

  // The process's cache, sized by KOLO_BUFFER_CACHE_BYTES (default 512 MiB). Never
  // destroyed, so that Buffers released during exit still find it.
  static MappingCache& process();
  // KOLO_BUFFER_CACHE_BYTES, checked (init() reads it too, so that a bad value
  // fails there and not at the first large Buffer).
  static std::size_t limit_from_env();

  // A kept private mapping of exactly `length` bytes (the most recently
  // released), or nullptr. Its contents are whatever its last Buffer left.
  void* take(std::size_t length);
  // The same of the shareable mappings (memory/shareable_memory.h), with their
  // descriptor, which stays the mapping's.
  ShareableMemory* take_shareable(std::size_t length);
  // Keeps `p` (a private mapping of `length` bytes), unmapping the oldest kept
  // mappings to stay within the limit; unmaps `p` itself when it alone exceeds it.
  void give(void* p, std::size_t length) noexcept;
  // The same of a shareable mapping. One a forked child privatized is unmapped
  // (its Buffer was the last to know it as anything but private memory).
  void give(ShareableMemory* memory) noexcept;

  std::size_t kept_bytes() const;

  // fork() handling, registered by shareable_memory.cc together with its own:
  // hold the lock across fork(); release it in the parent; in the child, unmap
  // everything kept (shareable_memory.cc says why) and release it.
  void lock_for_fork();
  void unlock_after_fork();
  void drop_all_in_child() noexcept;

 private:
  struct Kept {
    void* p;
    std::size_t length;
    ShareableMemory* memory;  // null: private
  };
  // The most recently released of `length` bytes, shareable or private; all null if none.
  Kept take_kept(std::size_t length, bool shareable);
  void keep(Kept kept) noexcept;
  static void release(const Kept& kept) noexcept;
  std::size_t limit_;
  mutable std::mutex mutex_;
  std::vector<Kept> kept_;  // oldest first
  std::size_t kept_bytes_ = 0;
};

}  // namespace kolo::detail
