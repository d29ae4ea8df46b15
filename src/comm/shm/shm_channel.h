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
  // More ranks than the CPUs they may run on together: a waiter then yields its
  // CPU at once, since the peer it waits for may be queued behind it.
  bool ranks_share_cpus() const { return oversubscribed_; }

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
  // True between the first acquire/post of a step and its finish_step: an error
  // thrown then leaves this rank out of step with its peers.
  bool mid_step() const { return mid_step_; }

  // ---- failure -------------------------------------------------------------------------
  // Callable from any thread: current and later waits throw ShutdownError(reason);
  // peers waiting on this rank fail with a PeerFailureError that carries it.
  void abort(const std::string& reason);
  // Throws ShutdownError when aborted.
  void throw_if_aborted() const;

 private:
  RankControl& control(int rank) const;
  void publish(Counter& counter, std::uint32_t value);
  void wait_until(int peer, Counter& counter, std::uint32_t target);
  bool spin_until(const Counter& counter, std::uint32_t target) const;
  void sleep_until(int peer, Counter& counter, std::uint32_t target);
  void check_peer(int peer, const Counter& counter, std::uint32_t target,
                  std::chrono::steady_clock::duration stalled_for) const;
  // Throws PeerFailureError(culprit, message), remembering the culprit for abort().
  [[noreturn]] void blame(int culprit, const std::string& message) const;
  void wake_own_sleepers();

  Mapping mapping_;
  Layout layout_;
  std::size_t small_bytes_;
  int rank_;
  CommunicatorOptions options_;
  std::uint32_t step_;
  std::chrono::nanoseconds spin_budget_;
  bool oversubscribed_;  // more ranks than usable CPUs: yield from the first poll
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
