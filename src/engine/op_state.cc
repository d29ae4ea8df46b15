#include "engine/op_state.h"

namespace kolo::detail {

void OpState::complete_part(std::exception_ptr error) {
  std::lock_guard lock(mutex_);
  if (error && !error_) error_ = error;
  if (--parts_ > 0) return;
  done_.store(true, std::memory_order_release);
  cv_.notify_all();
}

bool OpState::done() const { return done_.load(std::memory_order_acquire); }

bool OpState::wait_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  if (!cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_relaxed); })) return false;
  if (error_) std::rethrow_exception(error_);
  return true;
}

void OpState::wait_done_until(std::chrono::steady_clock::time_point deadline) const {
  std::unique_lock lock(mutex_);
  cv_.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_relaxed); });
}

void OpState::wait() const {
  // Done is published after the error (under the mutex, with release), and
  // neither changes afterwards: no lock needed to read them then.
  if (done_.load(std::memory_order_acquire)) {
    if (error_) std::rethrow_exception(error_);
    return;
  }
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace kolo::detail
