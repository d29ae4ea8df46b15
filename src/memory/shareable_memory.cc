#include "memory/shareable_memory.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "common/settings.h"
#include "memory/mapping_cache.h"

namespace kolo::detail {
namespace {

KOLO_SETTING(kShareableBuffers, {.name = "KOLO_SHAREABLE_BUFFERS", .kind = settings::Kind::Choice, .fallback = "auto",
                                 .choices = {"0", "1", "auto"},
                                 .doc = "which Buffers are memfds the host's other ranks can map"});

// The live shareable mappings' descriptors, which it owns. Changed once per
// fresh shareable Buffer and per mapping the cache unmaps, read only by fork(),
// so a plain mutex and a vector are enough (each mapping is at least a page,
// most 2 MiB and up: there are few).
struct Registry {
  std::mutex mutex;
  std::vector<std::unique_ptr<ShareableMemory>> live;
};

Registry& registry();

// A forked child would share its copy of every shareable Buffer with its
// parent (a MAP_SHARED mapping is inherited as such), where private memory is
// copy-on-write: a child filling "its" Buffer would change the parent's, and two
// children taking the same cached mapping would write into each other's (a torch
// DataLoader worker, a test harness forking ranks). So in the child the mapping
// cache first unmaps what it kept, then each live shareable mapping is replaced
// by a private copy of its contents at the same address and its file closed.
// The descriptors stay (the child's Buffers and views point at them), marked
// private, so that the in-place path treats that memory as plain. Both locks
// are held across fork() so that the child never finds one taken by a thread
// that does not exist there (no thread takes one while holding the other, so
// any order would do).
void privatize_in_child() {
  for (const auto& memory : registry().live) {
    if (memory->fd < 0) continue;  // privatized by an earlier fork
    void* copy = ::mmap(nullptr, memory->length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy != MAP_FAILED) {
      std::memcpy(copy, memory->base, memory->length);
      if (::mremap(copy, memory->length, memory->length, MREMAP_MAYMOVE | MREMAP_FIXED, memory->base) == MAP_FAILED) {
        ::munmap(copy, memory->length);
      }
    }
    ::close(memory->fd);
    memory->fd = -1;
    memory->inode = 0;
  }
  registry().mutex.unlock();
}

Registry& registry() {
  static Registry* r = [] {
    auto* created = new Registry();  // never destroyed: Buffers may be released during exit
    ::pthread_atfork(
        [] {
          MappingCache::process().lock_for_fork();
          registry().mutex.lock();
        },
        [] {
          registry().mutex.unlock();
          MappingCache::process().unlock_after_fork();
        },
        [] {
          MappingCache::process().drop_all_in_child();  // releases the cache's lock
          privatize_in_child();                          // and this the registry's
        });
    return created;
  }();
  return *r;
}

// Whether madvise(MADV_HUGEPAGE) gets shared memory huge pages; read once.
bool shmem_huge_pages() {
  static const bool on = [] {
    std::ifstream in("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
    std::string line;
    std::getline(in, line);
    const auto open = line.find('['), close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return false;
    const std::string chosen = line.substr(open + 1, close - open - 1);
    return chosen == "always" || chosen == "within_size" || chosen == "advise" || chosen == "force";
  }();
  return on;
}

}  // namespace

bool wants_shareable(bool requested) {
  // Read at every large allocation (cheap beside a mapping), so that a program
  // or a test may change it.
  const std::string value = kShareableBuffers.choice();
  if (value == "auto") return requested || shmem_huge_pages();
  return value == "1";
}

void* map_at_alignment(std::size_t length, std::size_t alignment, int fd) {
  // Reserve address space with room for an aligned start, put the memory there
  // and give back the rest.
  void* raw = ::mmap(nullptr, length + alignment, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const auto aligned = (start + alignment - 1) / alignment * alignment;
  const int kind = fd < 0 ? MAP_PRIVATE | MAP_ANONYMOUS : MAP_SHARED;
  void* p = ::mmap(reinterpret_cast<void*>(aligned), length, PROT_READ | PROT_WRITE, kind | MAP_FIXED, fd, 0);
  if (aligned > start) ::munmap(raw, aligned - start);
  const auto end = start + length + alignment;
  if (end > aligned + length) ::munmap(reinterpret_cast<void*>(aligned + length), end - (aligned + length));
  if (p == MAP_FAILED) {
    ::munmap(reinterpret_cast<void*>(aligned), length);
    return nullptr;
  }
  ::madvise(p, length, MADV_HUGEPAGE);  // a hint: fine if refused (shmem takes it only where the system allows)
  return p;
}

ShareableMemory* map_shareable(std::size_t length, std::size_t alignment) {
  if (length == 0) return nullptr;
  const int fd = ::memfd_create("kolo-buffer", MFD_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (::ftruncate(fd, static_cast<off_t>(length)) != 0 || ::fstat(fd, &st) != 0) {
    ::close(fd);
    return nullptr;
  }
  void* p = map_at_alignment(length, alignment, fd);
  if (p == nullptr) {
    ::close(fd);
    return nullptr;
  }
  try {
    auto memory = std::make_unique<ShareableMemory>(
        ShareableMemory{static_cast<std::byte*>(p), length, fd, static_cast<std::uint64_t>(st.st_ino)});
    ShareableMemory* made = memory.get();
    std::lock_guard lock(registry().mutex);
    registry().live.push_back(std::move(memory));
    return made;
  } catch (...) {
    ::munmap(p, length);
    ::close(fd);
    return nullptr;
  }
}

void unmap_shareable_in_child(ShareableMemory* memory) noexcept {
  auto& live = registry().live;
  const auto it = std::find_if(live.begin(), live.end(), [&](const auto& m) { return m.get() == memory; });
  if (it == live.end()) return;  // not one of this registry's: nothing to free
  ::munmap(memory->base, memory->length);
  if (memory->fd >= 0) ::close(memory->fd);
  std::swap(*it, live.back());
  live.pop_back();  // frees `memory`
}

void unmap_shareable(ShareableMemory* memory) noexcept {
  std::lock_guard lock(registry().mutex);
  unmap_shareable_in_child(memory);  // the same, under the lock
}

std::optional<ShareableLocation> locate(const ShareableMemory* memory, const void* p, std::size_t bytes) {
  if (memory == nullptr || memory->fd < 0 || !covers(*memory, p, bytes)) return std::nullopt;
  return ShareableLocation{memory->fd, memory->inode, memory->length,
                           static_cast<std::uint64_t>(static_cast<const std::byte*>(p) - memory->base)};
}

}  // namespace kolo::detail
