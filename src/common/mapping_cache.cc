#include "common/mapping_cache.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <iterator>

#include "common/env.h"

namespace kolo::detail {

MappingCache::~MappingCache() {
  for (const Kept& k : kept_) ::munmap(k.p, k.length);
}

MappingCache& MappingCache::process() {
  static MappingCache* cache = new MappingCache(static_cast<std::size_t>(
      std::max<std::int64_t>(0, env::get_int("KOLO_BUFFER_CACHE_BYTES", std::int64_t{512} << 20))));
  return *cache;
}

void* MappingCache::take(std::size_t length) {
  std::lock_guard lock(mutex_);
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->length != length) continue;
    void* p = it->p;
    kept_bytes_ -= length;
    kept_.erase(std::next(it).base());
    return p;
  }
  return nullptr;
}

void MappingCache::give(void* p, std::size_t length) noexcept {
  if (length > limit_) {
    ::munmap(p, length);
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
  for (const Kept& k : evicted) ::munmap(k.p, k.length);
  if (p != nullptr) ::munmap(p, length);
}

std::size_t MappingCache::kept_bytes() const {
  std::lock_guard lock(mutex_);
  return kept_bytes_;
}

}  // namespace kolo::detail
