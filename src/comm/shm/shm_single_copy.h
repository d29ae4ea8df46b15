// SINGLE-COPY BROADCAST AND ALLGATHER. Through the slots a large broadcast is
// handed over one slot at a time, and each hand-off needs the root and its
// receivers on a CPU at about the same moment. When more threads want to run than the ranks have
// CPUs, every hand-off waits for the scheduler instead (64 MiB, 2 ranks beside
// three busy processes on 2 CPUs: about 1.5 ms per 1 MiB slot, 0.65 GB/s).
// Then each receiver copies straight out of the root's buffer with
// process_vm_readv (Linux cross-memory attach), as Open MPI's shared-memory
// transport does: two synchronizations per call whatever its size, and a
// receiver needs a CPU only for its own copy.
//
// The root decides and tells its receivers in the first step, so the ranks
// cannot disagree. Alone the slot path is the faster one (root and receivers
// copy at the same time: 20 GB/s for 64 MiB against about 11 for one
// process_vm_readv stream), so by default (KOLO_SHM_SINGLE_COPY=auto) the root
// offers its buffer only while it waits for a CPU itself (SingleCopy::offer);
// `always` and `never` force the choice. The mode is the job's: rank 0 reads it
// and records it in the segment with the other tunables. A receiver the kernel
// refuses (it may not ptrace the root: another user, Yama, a container's
// seccomp profile) says so in the second step; every rank then runs the slot
// path, and the root logs why and stops offering.
//
// An allgatherv of large blocks in plain memory hands off through the slots
// the same way; there every rank offers its block and reads every peer's, when
// all ranks are willing and one of them waits for a CPU (all say so in the
// first step). A refusal stops every rank offering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "comm/shm/shm_channel.h"

namespace kolo::comm::shm {

// KOLO_SHM_SINGLE_COPY: auto (default), always or never; InvalidArgumentError otherwise.
SingleCopyMode single_copy_mode_from_env();

class SingleCopy {
 public:
  explicit SingleCopy(SingleCopyMode mode) : mode_(mode) {}

  // Whether the ranks may read each other's buffers at all: the job's mode is
  // not `never`. It is the same on every rank, so without it the calls skip
  // the step in which the ranks offer their buffers.
  bool enabled() const { return mode_ != SingleCopyMode::Never; }

  // Whether this rank, as a broadcast's root, offers its buffer to be read in
  // place. Under Auto: when the ranks share CPUs, or when the calling thread
  // spent more than 1/kLoadedShare of the time it wanted a CPU since the last
  // judgement waiting for one (the scheduler's count: a rank that waits for
  // a CPU is one its peers wait for at every hand-off).
  bool offer(const ShmChannel& channel) { return willing() && loaded(channel); }
  // Whether this rank lets its peers read its buffer at all: not under `never`,
  // nor once a peer was refused.
  bool willing() const { return !refused_ && mode_ != SingleCopyMode::Never; }
  // Whether a copy per call beats the slots' hand-offs now (`always`, ranks
  // that share CPUs, or this thread waiting for one).
  bool loaded(const ShmChannel& channel);
  // A peer could not read another's memory (`why`): stop offering.
  void refused(const std::string& why);

 private:
  // Judge over at least this much of the thread's time, running or waiting.
  static constexpr std::uint64_t kLoadWindowNs = 2'000'000;
  static constexpr std::uint64_t kLoadedShare = 10;

  SingleCopyMode mode_;
  bool refused_ = false;
  bool loaded_ = false;
  std::uint64_t running_ = 0, waiting_ = 0;  // the thread's CPU times at the last judgement
};

// Broadcasts of more than this many slots go through broadcast_single_copy: the
// root can fill its two slots without waiting for anyone, so only longer ones
// wait for hand-offs.
inline constexpr std::size_t kSingleCopyMinSlots = 2;

// Runs the broadcast in place of the root's buffer when the root offers it and
// every receiver can read it; returns false on every rank alike, `buffer`
// maybe partly written, when the caller must run the slot path instead.
bool broadcast_single_copy(ShmChannel& channel, SingleCopy& policy, std::byte* buffer, std::size_t bytes, int root);

// Runs the allgatherv with each rank reading every peer's block straight out of
// the peer's `send` when every rank is willing and one of them is loaded (each
// says so in a first step, so the ranks cannot disagree); a second step tells
// every rank that no one reads its `send` any more. `send` may be this rank's
// block of `recv`, but no other part of it. Returns false on every rank alike,
// `recv` maybe partly written, when the caller must run the slot path instead.
bool allgatherv_single_copy(ShmChannel& channel, SingleCopy& policy, const std::byte* send, std::byte* recv,
                            std::span<const std::size_t> sizes);

}  // namespace kolo::comm::shm
