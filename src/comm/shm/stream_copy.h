// Copies tuned for where their data goes next: into memory that will not be
// read again soon (copy_streaming), or into a slot another core reads next
// (copy_to_shared).
#pragma once

#include <cstddef>

namespace kolo::comm::shm {

// Outputs at least this large are copied with streaming stores: they do not
// fit in the caches anyway, and skipping the read-for-ownership of every
// destination line saves a fifth to a third of the copy's memory traffic.
inline constexpr std::size_t kStreamingOutputBytes = std::size_t{8} << 20;

// memcpy with non-temporal (cache-bypassing) stores for the bulk of `bytes`.
// The stores are fenced before returning, so they are ordered like plain ones.
void copy_streaming(void* dst, const void* src, std::size_t bytes);

// memcpy for data that another core copies out next: a slot of the shared
// segment. Lines written with plain vector stores stay modified in the writer's
// cache, and a reader on another core takes them at a quarter of the rate it
// takes lines written by `rep movsb` (bench/cross_core_copy shows it with a
// 1 MiB slot). glibc's memcpy switches from `rep movsb` to vector stores at the
// size of L2 (1 MiB on Zen 5), exactly the size of kolo's default slot, so the
// choice is made here rather than left to glibc.
void copy_to_shared(void* dst, const void* src, std::size_t bytes);

}  // namespace kolo::comm::shm
