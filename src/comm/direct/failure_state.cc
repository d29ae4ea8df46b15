#include "comm/direct/failure_state.h"

#include "kolo/error.h"

namespace kolo::comm::direct {

FailureState::FailureState(std::string name, FailureVerdict verdict, std::function<void()> close_hard)
    : name_(std::move(name)), verdict_(std::move(verdict)), close_hard_(std::move(close_hard)) {}

void FailureState::check_usable() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (aborted_) throw ShutdownError(abort_reason_);
}

void FailureState::throw_interrupted() {
  check_usable();
  throw ShutdownError(name_ + ": a wait was interrupted");  // not reached: only abort() interrupts
}

bool FailureState::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (aborted_) return false;
  aborted_ = true;
  abort_reason_ = reason;
  return true;
}

std::exception_ptr FailureState::record_failure(int job_rank, const std::string& message) {
  auto [culprit, verdict] = verdict_.claim(job_rank, message);
  auto error = std::make_exception_ptr(PeerFailureError(culprit, verdict));
  {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
    error = failure_;
  }
  close_hard_();
  return error;
}

void FailureState::fail(int job_rank, const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) std::rethrow_exception(failure_);
    if (aborted_) throw ShutdownError(abort_reason_);
  }
  std::rethrow_exception(record_failure(job_rank, message));
}

void FailureState::fail_from_outside(int job_rank, const std::string& message) {
  {
    std::lock_guard lock(mutex_);
    if (failure_) return;
  }
  record_failure(job_rank, message);
}

void FailureState::stop_with(const std::string& detail) {
  {
    std::lock_guard lock(mutex_);
    if (!failure_ && !aborted_)
      failure_ = std::make_exception_ptr(ShutdownError("kolo's " + name_ + " communicator stopped after an error" + detail));
  }
  close_hard_();
}

void FailureState::fail_locally(std::exception_ptr error) {
  stop_with(": " + error_text(error));
  std::rethrow_exception(error);
}

void FailureState::stop() { stop_with(""); }

}  // namespace kolo::comm::direct
