// The step protocol over a joined segment: slots, progress counters, and waits
// that turn a dead, stalled, closed or aborted peer into an exception. The
// collectives in shm_communicator.cc are written in terms of these steps; the
// protocol is described at the top of that file.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/shm/shm_layout.h"
#include "comm/shm/shm_segment.h"

namespace kolo::comm::shm {

class ShmChannel {
 public:
  ShmChannel(JoinedSegment segment, int rank, const CommunicatorOptions& options);
  // Marks this rank closed (peers still waiting on it fail at once) and unmaps.
  ~ShmChannel();
  ShmChannel(const ShmChannel&) = delete;
  ShmChannel& operator=(const ShmChannel&) = delete;

  int rank() const { return rank_; }
  int size() const { return layout_.size; }
  std::size_t slot_bytes() const { return layout_.slot_bytes; }
  std::size_t small_bytes() const { return small_bytes_; }
  std::size_t mapped_bytes() const { return mapped_bytes_; }
  // The job's KOLO_SHM_SINGLE_COPY (rank 0's, recorded in the segment).
  SingleCopyMode single_copy_mode() const { return single_copy_; }
  // More ranks than the CPUs they may run on together: a waiter then yields its
  // CPU at once, since the peer it waits for may be queued behind it.
  bool ranks_share_cpus() const { return oversubscribed_; }
  // The job rank of this channel's `rank`, for messages.
  int job_rank(int rank) const {
    const auto& ranks = options_.job_ranks;
    return rank >= 0 && rank < static_cast<int>(ranks.size()) ? ranks[static_cast<std::size_t>(rank)] : rank;
  }

  // The name of the running collective, for error messages.
  void set_operation(const char* name) { operation_ = name; }

  // ---- the current step ------------------------------------------------------------
  // Every rank runs the same steps in the same order; `step()` numbers them.
  std::uint32_t step() const { return step_; }
  // `rank`'s slot for the current step (slots alternate between steps).
  std::byte* slot(int rank) const;
  // Waits until every rank has finished the step that last used this rank's slot
  // of the current step (two steps ago); then this rank may write it.
  void acquire_slot();
  // This rank's slot holds its data (post) or its reduced segment (post_reduced).
  void post();
  void post_reduced();
  // Waits until `peer` has posted / posted its reduced segment for this step.
  void wait_posted(int peer);
  void wait_reduced(int peer);
  // This rank has read everything it needs of the step; move to the next one.
  void finish_step();

  // ---- flagged lines: messages of up to kFlaggedBytes (shm_layout.h) -------------------
  // The writer (after acquire_slot) puts its message into its flagged area for the
  // step, then posts. A reader waits for each line's flag, which comes in the same
  // cache-line transfer as the line's data: one transfer on the critical path
  // instead of two (the posted counter, then the data).
  void write_flagged(const std::byte* data, std::size_t bytes);
  // Copies `peer`'s flagged message of `bytes` bytes for this step into `out`.
  void read_flagged(int peer, std::byte* out, std::size_t bytes);
  // For a message that begins with its own length (Communicator::allgather_self_sized):
  // returns the length it declares (InvalidArgumentError when that exceeds
  // `max_bytes`) and, when that is at most `flagged_limit`, copies the message
  // into `out`. A longer message's flagged part is its first line; the rest is
  // the caller's to fetch.
  std::uint32_t read_flagged_self_sized(int peer, std::byte* out, std::size_t max_bytes, std::size_t flagged_limit);
  // Room for one flagged message per rank, for algorithms that need to keep them.
  std::byte* scratch(int rank) { return scratch_.data() + static_cast<std::size_t>(rank) * kFlaggedBytes; }
  // True between the first acquire/post of a step and its finish_step: an error
  // thrown then leaves this rank out of step with its peers.
  bool mid_step() const { return mid_step_; }

  // ---- failure -------------------------------------------------------------------------
  // Callable from any thread: current and later waits throw ShutdownError(reason);
  // peers waiting on this rank fail with a PeerFailureError that carries it (or,
  // after publish_failure, the failure's message, which names the rank to blame).
  void abort(const std::string& reason);
  // Throws ShutdownError when aborted.
  void throw_if_aborted() const;
  // A collective of this rank failed with `message` because a peer failed (the
  // last one a wait blamed): peers waiting on this rank fail at once and name that
  // peer, instead of waiting out the peer timeout and blaming this rank. A
  // broadcast's receivers wait on the root alone, so only this tells them that a
  // receiver the root waited for died.
  void publish_failure(const std::string& message);

 private:
  RankControl& control(int rank) const;
  FlaggedLine* flagged(int rank) const;
  // Waits for `line` of `peer`'s flagged area for this step; a peer that posted
  // without it sent fewer than `bytes` bytes (InvalidArgumentError).
  void wait_flagged_line(int peer, const FlaggedLine& line, std::size_t bytes);
  // Polls `ready` with pause instructions, yielding as described in
  // shm_channel.cc; false when the spin budget ran out (or on abort).
  template <class Ready>
  bool spin(Ready ready) const;
  // What a peer's publication for this step proves: it finished the step before.
  void note_peer_reached_step(int peer);
  void publish(Counter& counter, std::uint32_t value);
  void wait_until(int peer, Counter& counter, std::uint32_t target);
  bool spin_until(const Counter& counter, std::uint32_t target) const;
  void sleep_until(int peer, Counter& counter, std::uint32_t target);
  void check_peer(int peer, const Counter& counter, std::uint32_t target,
                  std::chrono::steady_clock::duration stalled_for) const;
  // "rank <job rank>" of `rank` of this channel, for messages.
  std::string rank_name(int rank) const;
  // Throws PeerFailureError(culprit, message), remembering the culprit for abort().
  [[noreturn]] void blame(int culprit, const std::string& message) const;
  void wake_own_sleepers();
  // Writes this rank's state word with `reason` and the peer it blames, unless a
  // failure or an abort is already there. Under abort_mutex_.
  void publish_state(RankState state, const std::string& reason);

  Mapping mapping_;
  Layout layout_;
  std::size_t small_bytes_;
  std::size_t mapped_bytes_;
  SingleCopyMode single_copy_;
  int rank_;
  CommunicatorOptions options_;
  std::uint32_t step_;
  // Steps finished, counted from 0 on every rank: the flags of flagged lines (64
  // bits, so that a flag is never mistaken for one from 2^32 steps earlier).
  std::uint64_t flag_step_ = 0;
  // Per peer, a value its consumed counter has certainly reached (a peer that
  // posted for step s has finished step s-1): acquire_slot reads the peer's
  // counter (a cache miss) only when this does not already settle it.
  std::vector<std::uint32_t> known_consumed_;
  std::vector<std::byte> scratch_;
  std::chrono::nanoseconds spin_budget_;
  bool oversubscribed_;  // more ranks than usable CPUs: a spinning wait yields
  const char* operation_ = "setup";
  bool mid_step_ = false;

  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
  // The peer this rank last declared failed (-1: none); abort() publishes it.
  mutable std::atomic<int> failed_peer_{-1};
  // The futex word the collective thread sleeps on, so that abort() can wake it.
  std::atomic<std::atomic<std::uint32_t>*> sleeping_on_{nullptr};
};

}  // namespace kolo::comm::shm
