// The shared state behind a Handle: written by the cycle that runs the operation, waited on
// by the user's threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo::engine {
class Engine;
}

namespace kolo::detail {

class OpState {
 public:
  // `parts`: how many tensors must complete before the operation has (a grouped
  // allreduce has one part per tensor).
  explicit OpState(std::string name, int parts = 1) : name_(std::move(name)), parts_(parts) {}

  const std::string& name() const { return name_; }

  // Makes a finished state new again, for another operation. Only for a state
  // nobody else refers to (see new_state in api/collectives.cc).
  void reset(const std::string& name, int parts = 1);

  // Marks one part finished; the first error wins. Wakes waiters on the last part.
  void complete_part(std::exception_ptr error = nullptr);

  bool done() const;
  // Blocks until done or `deadline`; returns false on timeout. Rethrows the error.
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  void wait() const;
  // Blocks until done or `deadline`, without rethrowing.
  void wait_done_until(std::chrono::steady_clock::time_point deadline) const;

  // The engine that runs this operation, so that a waiter can drive its cycles.
  std::weak_ptr<engine::Engine> engine;

  // Results filled by the cycle before the last complete_part().
  Buffer output;
  std::vector<std::int64_t> received_splits;
  int last_joined = -1;

 private:
  std::string name_;
  // Completion takes no lock unless a waiter sleeps: done_ and sleepers_ are
  // sequentially consistent, so either the waiter sees done_ before it sleeps,
  // or the completer sees the sleeper and notifies under the mutex.
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  mutable std::atomic<int> sleepers_{0};
  std::atomic<int> parts_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;  // written under mutex_ before done_, never after

  // Runs `sleep` (which waits on cv_ under `lock`) counted as a sleeper.
  template <class Sleep>
  void sleep(Sleep sleep) const;
};

}  // namespace kolo::detail
