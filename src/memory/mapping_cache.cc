#include "memory/mapping_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "common/settings.h"
#include "memory/shareable_memory.h"

namespace kolo::detail {

void MappingCache::release(const Kept& kept) noexcept {
  if (kept.memory) {
    unmap_shareable(kept.memory);
  } else {
    ::munmap(kept.p, kept.length);
  }
}

MappingCache::~MappingCache() {
  for (const Kept& k : kept_) release(k);
}

MappingCache& MappingCache::process() {
  static MappingCache* cache = new MappingCache(limit_from_env());
  return *cache;
}

// A limit, never allocated as a whole: up to 1024G.
KOLO_SETTING(kBufferCacheBytes, {.name = "KOLO_BUFFER_CACHE_BYTES", .kind = settings::Kind::Integer, .fallback = "512M",
                                 .min = 0, .max = std::int64_t{1} << 40,
                                 .doc = "bytes of released outputs kept for the next output of the same size"});

std::size_t MappingCache::limit_from_env() { return static_cast<std::size_t>(kBufferCacheBytes.integer()); }

void MappingCache::lock_for_fork() { mutex_.lock(); }
void MappingCache::unlock_after_fork() { mutex_.unlock(); }

void MappingCache::drop_all_in_child() noexcept {
  for (const Kept& k : kept_) {
    if (k.memory) {
      unmap_shareable_in_child(k.memory);
    } else {
      ::munmap(k.p, k.length);
    }
  }
  kept_.clear();
  kept_bytes_ = 0;
  mutex_.unlock();
}

MappingCache::Kept MappingCache::take_kept(std::size_t length, bool shareable) {
  std::lock_guard lock(mutex_);
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->length != length || (it->memory != nullptr) != shareable) continue;
    const Kept taken = *it;
    kept_bytes_ -= length;
    kept_.erase(std::next(it).base());
    return taken;
  }
  return Kept{nullptr, 0, nullptr};
}

void* MappingCache::take(std::size_t length) { return take_kept(length, false).p; }

ShareableMemory* MappingCache::take_shareable(std::size_t length) { return take_kept(length, true).memory; }

void MappingCache::give(void* p, std::size_t length) noexcept { keep({p, length, nullptr}); }

void MappingCache::give(ShareableMemory* memory) noexcept {
  if (memory->fd < 0) {
    release({memory->base, memory->length, memory});
    return;
  }
  keep({memory->base, memory->length, memory});
}

void MappingCache::keep(Kept kept) noexcept {
  if (kept.length > limit_) {
    release(kept);
    return;
  }
  std::vector<Kept> evicted;
  bool kept_it = false;
  {
    std::lock_guard lock(mutex_);
    while (kept_bytes_ + kept.length > limit_) {
      evicted.push_back(kept_.front());
      kept_bytes_ -= kept_.front().length;
      kept_.erase(kept_.begin());
    }
    try {
      kept_.push_back(kept);
      kept_bytes_ += kept.length;
      kept_it = true;
    } catch (...) {  // no memory for the entry: then not kept
    }
  }
  for (const Kept& k : evicted) release(k);
  if (!kept_it) release(kept);
}

std::size_t MappingCache::kept_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace kolo::detail
