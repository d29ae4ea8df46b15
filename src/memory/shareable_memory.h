// Memory that the other processes of a host can map: shareable kolo::Buffers
// live in memfds instead of private anonymous mappings, and this registry says
// which file and offset holds a given address. The shared-memory communicator
// then reduces and gathers large buffers by reading and writing every rank's
// memory where it lies (comm/shm/shm_in_place.h) instead of copying it through
// the segment's slots, as MPI_Alloc_mem or NCCL's registered buffers let those
// libraries do.
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

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
void* map_shareable(std::size_t length, std::size_t alignment);

// Unmaps `p` if map_shareable made it (closing its memfd) and returns true;
// returns false for any other address.
bool unmap_shareable(void* p, std::size_t length) noexcept;

// unmap_shareable for the handler that forgets the mapping cache in a forked
// child, which runs while the registry's lock is held across fork() (see
// shareable_memory.cc): the same without taking the lock.
bool unmap_shareable_in_child(void* p, std::size_t length) noexcept;

// Where [p, p + bytes) lies in this process's shareable memory: the memfd's
// descriptor number in this process, its inode (so that a peer can tell it
// opened the right file), the file's length and the offset of `p` in it.
struct ShareableLocation {
  int fd = -1;
  std::uint64_t inode = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t offset = 0;
};
std::optional<ShareableLocation> find_shareable(const void* p, std::size_t bytes);

}  // namespace kolo::detail
