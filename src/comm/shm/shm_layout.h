// The layout of a job's shared-memory segment: what lives where, and the
// structures every rank of the job maps. The protocol that uses them is described
// at the top of shm_communicator.cc.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kolo::comm::shm {

inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kPageSize = 4096;
// Written last by rank 0, once the header is complete ("KOL" + layout version 4).
inline constexpr std::uint32_t kReadyMagic = 0x4b4f4c04;
// The job's nonce in the header (segment_checks.h).
inline constexpr std::size_t kNonceBytes = 32;

// Flagged lines (small messages, shm_channel.h): each 64-byte line carries 56
// bytes of data and the 64-bit number of the step that wrote it. Every rank has
// two areas of kFlaggedLines lines (by step parity, like the slots), used for
// nothing else, so a flag is only ever a step number and never stale data.
inline constexpr std::size_t kFlaggedLineData = 56;
inline constexpr std::size_t kFlaggedLines = 32;
inline constexpr std::size_t kFlaggedBytes = kFlaggedLineData * kFlaggedLines;  // 1792 bytes per message
struct alignas(kCacheLine) FlaggedLine {
  std::byte data[kFlaggedLineData];
  std::atomic<std::uint64_t> step;  // 1 + the step that wrote `data`; 0: never written
};
static_assert(sizeof(FlaggedLine) == kCacheLine);

static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "futex words must be plain lock-free 32-bit words");

// A progress counter of one rank, and how many processes sleep on it (so that the
// rank only makes a FUTEX_WAKE system call when somebody actually sleeps).
struct alignas(kCacheLine) Counter {
  std::atomic<std::uint32_t> value;
  std::atomic<std::uint32_t> sleepers;
};

enum class RankState : std::uint32_t {
  Active = 0,
  Closed = 1,   // the communicator was destroyed
  Aborted = 2,  // abort() was called; `reason` says why
  Failed = 3,   // a collective failed because `failed_peer` did; `reason` is the error
};

inline constexpr std::size_t kReasonBytes = 192;
// CPUs 0..1023, as a bit set (the size of glibc's cpu_set_t).
inline constexpr std::size_t kCpuMaskWords = 16;

// Written only by its own rank (except `sleepers`), read by every peer. Each
// counter has its own cache line so that publishing one does not disturb readers
// of another.
struct alignas(kCacheLine) RankControl {
  Counter posted;    // >= s+1: this rank's slot holds its data for step s
  Counter reduced;   // >= s+1: this rank's slot holds its reduced segment of step s
  Counter consumed;  // >= s+1: this rank has read everything it needs of step s
  alignas(kCacheLine) std::atomic<std::int32_t> pid;
  std::atomic<std::uint32_t> state;
  // When this rank failed or aborted because a peer failed: that peer's rank + 1, so that
  // the ranks waiting on this one name the rank that failed, not the messenger.
  // 0 (as the segment is created): none, or not known.
  std::atomic<std::int32_t> failed_peer;
  char reason[kReasonBytes];
  // The CPUs this rank may run on, written before it registers: together the
  // ranks' masks say whether they share CPUs (and so how a waiter should wait).
  std::uint64_t cpus[kCpuMaskWords];
};

struct alignas(kCacheLine) SegmentHeader {
  std::atomic<std::uint32_t> magic;  // kReadyMagic once the fields below are valid
  std::uint32_t size;                // ranks in the job
  std::uint64_t slot_bytes;          // bytes of one slot (each rank has two)
  std::uint64_t small_bytes;         // allreduce up to this size takes the one-step path
  std::uint64_t total_bytes;         // size of the whole segment
  std::uint32_t first_step;          // initial value of every counter (see SegmentConfig)
  std::uint64_t mapped_bytes;        // allreduce, allgatherv from this size: in place of shareable buffers
  std::uint32_t single_copy;         // SingleCopyMode (shm_segment.h)
  std::uint8_t nonce[kNonceBytes];   // proves that a holder of the job's secret made it
  alignas(kCacheLine) std::atomic<std::uint32_t> attached;  // ranks that have mapped it
};

// Offsets of every part, computed identically by every rank from (size, slot_bytes).
struct Layout {
  int size = 0;
  std::size_t slot_bytes = 0;
  std::size_t control_offset = 0;
  std::size_t flagged_offset = 0;  // per rank two areas of kFlaggedLines lines
  std::size_t data_offset = 0;
  std::size_t total_bytes = 0;

  static Layout compute(int size, std::size_t slot_bytes) {
    Layout l;
    l.size = size;
    l.slot_bytes = slot_bytes;
    l.control_offset = round_up(sizeof(SegmentHeader), kPageSize);
    l.flagged_offset = round_up(l.control_offset + sizeof(RankControl) * static_cast<std::size_t>(size), kPageSize);
    l.data_offset =
        round_up(l.flagged_offset + 2 * kFlaggedLines * sizeof(FlaggedLine) * static_cast<std::size_t>(size), kPageSize);
    l.total_bytes = l.data_offset + 2 * slot_bytes * static_cast<std::size_t>(size);
    return l;
  }

  static constexpr std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
};

}  // namespace kolo::comm::shm
