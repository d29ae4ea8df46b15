// Memory that the other processes of a host can map: shareable kolo::Buffers
// live in memfds instead of private anonymous mappings, and each such mapping
// has a descriptor (kolo::ShareableMemory: which file holds it) that the Buffer
// and its views carry (Tensor::memory). The shared-memory communicator then
// reduces and gathers large buffers by reading and writing every rank's memory
// where it lies (comm/shm/shm_in_place.h) instead of copying it through the
// segment's slots, as MPI_Alloc_mem or NCCL's registered buffers let those
// libraries do. It learns where a buffer lies from the descriptor the call
// carries, never from the address alone: a pointer into shareable memory
// without its descriptor is plain memory to kolo.
//
// Which Buffers are shareable (KOLO_SHAREABLE_BUFFERS):
//   0     none (for comparisons);
//   1     every large Buffer (2 MiB and up) and every Buffer::shareable();
//   auto  (default) Buffer::shareable(), and the other large Buffers only when
//         the kernel gives shared memory transparent huge pages
//         (/sys/kernel/mm/transparent_hugepage/shmem_enabled not "never" or
//         "deny"): without them every 4 KiB page of a fresh buffer is a fault of
//         its own, which makes the first touch of a fresh large Buffer many
//         times slower than with huge pages.
//
// Descriptors live as long as their mapping: while a Buffer holds it, then in
// the mapping cache (memory/mapping_cache.h) until the cache unmaps it. A view
// that outlives its Buffer is the caller's error, as for any tensor's memory.
// The registry of live descriptors exists for fork(): a forked child must
// privatize every shareable mapping (shareable_memory.cc says why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

namespace kolo {

// Immutable after map_shareable() made it, except in a forked child, where it
// becomes private (fd -1): the only thread there is the one that forked.
struct ShareableMemory {
  std::byte* base = nullptr;  // the mapping in this process
  std::size_t length = 0;     // of the mapping and of the file
  int fd = -1;                // the memfd in this process; -1: privatized (in a forked child)
  std::uint64_t inode = 0;    // so that a peer can tell it opened the right file
};

}  // namespace kolo

namespace kolo::detail {

// Whether a Buffer should be shareable: `requested` for Buffer::shareable(),
// else a large Buffer under the policy above.
bool wants_shareable(bool requested);

// `length` bytes (a multiple of the page size) mapped read-write at an address
// aligned to `alignment` (a multiple of the page size): of the memfd `fd`
// (shared), or private anonymous memory when `fd` is -1; nullptr on failure.
void* map_at_alignment(std::size_t length, std::size_t alignment, int fd);

// A shareable mapping of `length` bytes (a multiple of the page size) at an
// address aligned to `alignment` (a multiple of the page size), or nullptr when
// the system refuses (no memfd, no free file descriptor): the caller then maps
// private memory.
ShareableMemory* map_shareable(std::size_t length, std::size_t alignment);

// Unmaps the memory map_shareable made, closes its memfd and frees `memory`.
void unmap_shareable(ShareableMemory* memory) noexcept;

// unmap_shareable for the handler that forgets the mapping cache in a forked
// child, which runs while the registry's lock is held across fork() (see
// shareable_memory.cc): the same without taking the lock.
void unmap_shareable_in_child(ShareableMemory* memory) noexcept;

// Whether [p, p + bytes) lies inside `memory`'s mapping.
inline bool covers(const ShareableMemory& memory, const void* p, std::size_t bytes) {
  const auto* at = static_cast<const std::byte*>(p);
  return at >= memory.base && at <= memory.base + memory.length &&
         bytes <= static_cast<std::size_t>(memory.base + memory.length - at);
}

// Where [p, p + bytes) lies in the file of `memory`: the memfd's descriptor
// number in this process, its inode, the file's length and the offset of `p` in
// it. Nothing when `memory` is null, privatized (in a forked child), or does not
// cover the range.
struct ShareableLocation {
  int fd = -1;
  std::uint64_t inode = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t offset = 0;
};
std::optional<ShareableLocation> locate(const ShareableMemory* memory, const void* p, std::size_t bytes);

}  // namespace kolo::detail
