#include "comm/mpi/mpi_wait.h"

#include <thread>

#include "comm/mpi/mpi_session.h"
#include "comm/mpi/mpi_settings.h"
#include "kolo/error.h"

namespace kolo::comm::mpi_impl {

PollPolicy PollPolicy::from_env() {
  PollPolicy p;
  p.spin = std::chrono::microseconds(kSpinUs.integer());
  p.poll = std::chrono::microseconds(kPollUs.integer());
  return p;
}

void Waiter::check_usable() {
  std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
  if (aborted_) throw ShutdownError(abort_reason_);
}

void Waiter::abort(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (aborted_) return;
  abort_reason_ = reason;
  aborted_ = true;
}

void Waiter::give_up(std::exception_ptr error) {
  abandoned_ = true;
  mark_mpi_poisoned();
  {
    std::lock_guard lock(mutex_);
    if (!failure_) failure_ = error;
  }
  std::rethrow_exception(error);
}

void Waiter::wait(MPI_Request& request, const char* what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto spin_until = start + policy_.spin;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what);
    if (done) return;
    if (aborted_) {
      std::string reason;
      {
        std::lock_guard lock(mutex_);
        reason = abort_reason_;
      }
      give_up(std::make_exception_ptr(ShutdownError(reason)));
    }
    const auto now = Clock::now();
    if (now - start > peer_timeout_)
      give_up(std::make_exception_ptr(PeerFailureError(
          -1, std::string(what) + " made no progress for " +
                  std::to_string(std::chrono::duration_cast<std::chrono::seconds>(peer_timeout_).count()) +
                  " s: a rank stalled (MPI does not tell which; KOLO_PEER_TIMEOUT sets the limit)")));
    if (now >= spin_until && policy_.poll.count() > 0) std::this_thread::sleep_for(policy_.poll);
  }
}

}  // namespace kolo::comm::mpi_impl
