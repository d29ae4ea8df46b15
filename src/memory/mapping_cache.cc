#include "memory/mapping_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "common/env.h"
#include "memory/shareable_memory.h"

namespace kolo::detail {
namespace {

// Buffers' mappings are private memory or shareable memfds; the latter also
// close their file.
void release(void* p, std::size_t length) noexcept {
  if (!unmap_shareable(p, length)) ::munmap(p, length);
}

}  // namespace

MappingCache::~MappingCache() {
  for (const Kept& k : kept_) release(k.p, k.length);
}

MappingCache& MappingCache::process() {
  static MappingCache* cache = new MappingCache(limit_from_env());
  return *cache;
}

std::size_t MappingCache::limit_from_env() {
  return static_cast<std::size_t>(env::get_int_in("KOLO_BUFFER_CACHE_BYTES", std::int64_t{512} << 20, 0, INT64_MAX));
}

void MappingCache::lock_for_fork() { mutex_.lock(); }
void MappingCache::unlock_after_fork() { mutex_.unlock(); }

void MappingCache::drop_all_in_child() noexcept {
  for (const Kept& k : kept_) {
    if (!unmap_shareable_in_child(k.p, k.length)) ::munmap(k.p, k.length);
  }
  kept_.clear();
  kept_bytes_ = 0;
  mutex_.unlock();
}

void* MappingCache::take(std::size_t length, bool shareable) {
  std::lock_guard lock(mutex_);
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->length != length || find_shareable(it->p, 1).has_value() != shareable) continue;
    void* p = it->p;
    kept_bytes_ -= length;
    kept_.erase(std::next(it).base());
    return p;
  }
  return nullptr;
}

void MappingCache::give(void* p, std::size_t length) noexcept {
  if (length > limit_) {
    release(p, length);
    return;
  }
  std::vector<Kept> evicted;
  {
    std::lock_guard lock(mutex_);
    while (kept_bytes_ + length > limit_) {
      evicted.push_back(kept_.front());
      kept_bytes_ -= kept_.front().length;
      kept_.erase(kept_.begin());
    }
    try {
      kept_.push_back({p, length});
      kept_bytes_ += length;
      p = nullptr;
    } catch (...) {  // no memory for the entry: then not kept
    }
  }
  for (const Kept& k : evicted) release(k.p, k.length);
  if (p != nullptr) release(p, length);
}

std::size_t MappingCache::kept_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace kolo::detail
