#include "engine/op_state.h"

#include "common/wake_slice.h"

namespace kolo::detail {

void OpState::reset(const std::string& name, int parts) {
  name_ = name;  // keeps its capacity
  parts_.store(parts, std::memory_order_relaxed);
  done_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  output = Buffer{};
  received_splits.clear();
  last_joined = -1;
}

void OpState::complete_part(std::exception_ptr error) {
  if (error) {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = error;  // the first error wins
  }
  if (parts_.fetch_sub(1, std::memory_order_acq_rel) > 1) return;
  done_.store(true, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  std::lock_guard lock(mutex_);
  cv_.notify_all();
}

// Sequentially consistent: the waiters' check after counting themselves (sleep) must
// not be ordered before it. On x86 this is a plain load.
bool OpState::done() const { return done_.load(std::memory_order_seq_cst); }

template <class Sleep>
void OpState::sleep(Sleep sleep) const {
  const ShortSliceWhileAsleep short_slice(caller_wake_slice());
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  {
    std::unique_lock lock(mutex_);
    sleep(lock);
  }
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
}

bool OpState::wait_until(std::chrono::steady_clock::time_point deadline) const {
  if (!done()) {
    sleep([&](std::unique_lock<std::mutex>& lock) { cv_.wait_until(lock, deadline, [&] { return done(); }); });
    if (!done()) return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

void OpState::wait_done_until(std::chrono::steady_clock::time_point deadline) const {
  if (done()) return;
  sleep([&](std::unique_lock<std::mutex>& lock) { cv_.wait_until(lock, deadline, [&] { return done(); }); });
}

void OpState::wait() const {
  if (!done()) sleep([&](std::unique_lock<std::mutex>& lock) { cv_.wait(lock, [&] { return done(); }); });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace kolo::detail
