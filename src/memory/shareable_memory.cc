#include "memory/shareable_memory.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <map>
#include <mutex>

#include "common/env.h"
#include "memory/mapping_cache.h"

namespace kolo::detail {
namespace {

struct Region {
  std::size_t length;
  int fd;
  std::uint64_t inode;
};

// Shareable mappings by start address. Looked up once per large collective and
// changed once per fresh large Buffer (the mapping cache reuses them), so a
// plain mutex is enough.
struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, Region> regions;
};

Registry& registry();

// A forked child would share its copy of every shareable Buffer with its
// parent (a MAP_SHARED mapping is inherited as such), where private memory is
// copy-on-write: a child filling "its" Buffer would change the parent's, and two
// children taking the same cached mapping would write into each other's (a torch
// DataLoader worker, a test harness forking ranks). So in the child the mapping
// cache first unmaps what it kept, then each live shareable mapping is replaced
// by a private copy of its contents at the same address, and the files are
// forgotten. Both locks are held across fork() so that the child never finds
// one taken by a thread that does not exist there, taken in the order
// MappingCache::take() takes them (the cache's, then the registry's).
void privatize_in_child() {
  auto& regions = registry().regions;
  for (const auto& [address, region] : regions) {
    void* const at = reinterpret_cast<void*>(address);
    void* copy = ::mmap(nullptr, region.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy != MAP_FAILED) {
      std::memcpy(copy, at, region.length);
      if (::mremap(copy, region.length, region.length, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
        ::munmap(copy, region.length);
      }
    }
    ::close(region.fd);
  }
  regions.clear();
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
  const std::string value = env::get_choice("KOLO_SHAREABLE_BUFFERS", "auto", {"0", "1", "auto"});
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

void* map_shareable(std::size_t length, std::size_t alignment) {
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
    std::lock_guard lock(registry().mutex);
    registry().regions[reinterpret_cast<std::uintptr_t>(p)] = Region{length, fd, static_cast<std::uint64_t>(st.st_ino)};
  } catch (...) {
    ::munmap(p, length);
    ::close(fd);
    return nullptr;
  }
  return p;
}

bool unmap_shareable_in_child(void* p, std::size_t length) noexcept {
  auto& regions = registry().regions;
  auto it = regions.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == regions.end()) return false;
  const int fd = it->second.fd;
  regions.erase(it);
  ::munmap(p, length);
  ::close(fd);
  return true;
}

bool unmap_shareable(void* p, std::size_t length) noexcept {
  std::lock_guard lock(registry().mutex);
  return unmap_shareable_in_child(p, length);  // the same, under the lock
}

std::optional<ShareableLocation> find_shareable(const void* p, std::size_t bytes) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(registry().mutex);
  auto& regions = registry().regions;
  auto it = regions.upper_bound(address);
  if (it == regions.begin()) return std::nullopt;
  it = std::prev(it);
  const std::uintptr_t offset = address - it->first;
  if (offset > it->second.length || bytes > it->second.length - offset) return std::nullopt;
  return ShareableLocation{it->second.fd, it->second.inode, it->second.length, offset};
}

}  // namespace kolo::detail
