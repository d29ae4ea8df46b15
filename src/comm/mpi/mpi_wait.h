// Waiting for a non-blocking MPI operation without giving up abort() and the
// peer timeout, and without burning a core for as long as a peer is late.
//
// MPI has no way to interrupt a blocking call, so every collective is started
// non-blocking and polled with MPI_Test, which also drives MPI's progress. The
// poller spins (MPI_Test back to back) for KOLO_MPI_SPIN_US after the start,
// which keeps small collectives at MPI's latency, then tests every
// KOLO_MPI_POLL_US and sleeps in between. Blocking MPI calls would spin for the
// whole wait: a rank whose peers are late (still computing, or idle between
// engine cycles) would keep a core at 100%. The price of sleeping is up to one
// poll interval of added latency once the spin window has passed, and slower
// progress of long transfers that need MPI_Test to advance (docs in mpi_test.cc's
// header give measured numbers).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

namespace kolo::comm::mpi_impl {

// KOLO_MPI_SPIN_US and KOLO_MPI_POLL_US (mpi_settings.h, which gives the defaults).
struct PollPolicy {
  std::chrono::microseconds spin{};
  std::chrono::microseconds poll{};
  static PollPolicy from_env();
};

class Waiter {
 public:
  Waiter(PollPolicy policy, std::chrono::milliseconds peer_timeout) : policy_(policy), peer_timeout_(peer_timeout) {}

  // Waits for `request`. Throws ShutdownError after abort() and PeerFailureError
  // (rank unknown: MPI does not tell which peer is late) past the peer timeout;
  // either leaves the request abandoned and the communicator unusable.
  void wait(MPI_Request& request, const char* what);
  // Throws the error that made the communicator unusable, if any.
  void check_usable();
  // From any thread: the current and every later wait throws ShutdownError.
  void abort(const std::string& reason);
  // A wait gave up on its request, which MPI may still complete into its buffers
  // whenever MPI makes progress: no MPI call may follow.
  bool abandoned() const { return abandoned_; }

 private:
  [[noreturn]] void give_up(std::exception_ptr error);

  PollPolicy policy_;
  std::chrono::milliseconds peer_timeout_;
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abandoned_{false};
  std::mutex mutex_;
  std::string abort_reason_;
  std::exception_ptr failure_;
};

}  // namespace kolo::comm::mpi_impl
