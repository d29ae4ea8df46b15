// The failure and abort state of a transport's mesh (gloo's, kolo's own TCP),
// shared between the thread that runs the collectives and abort() from any other.
//
// The first failure wins: it goes to the job-wide verdict (failure_verdict.h), the
// mesh's connections are closed hard through `close_hard` (so that every peer
// waiting on this rank wakes at once), and every later call rethrows it. After
// abort() a peer closing is a shutdown, not a failure.
#pragma once

#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "comm/mesh/failure_verdict.h"
#include "kolo/error.h"

namespace kolo::comm::direct {

class FailureState {
 public:
  // `name` ("gloo", "tcp") words the errors; `close_hard` must not throw and is
  // called on the collectives' thread only.
  FailureState(std::string name, FailureVerdict verdict, std::function<void()> close_hard);

  // Throws the recorded failure, or ShutdownError after abort().
  void check_usable();
  // A wait returned early: throws what check_usable() throws.
  [[noreturn]] void throw_interrupted();
  // Marks the mesh aborted; false when it already was (the caller wakes its waits
  // only the first time). Never blocks on the network.
  bool abort(const std::string& reason);

  // Job rank `job_rank` failed as `message` says: records the verdict, closes and
  // throws PeerFailureError (or the earlier failure, or ShutdownError after abort()).
  [[noreturn]] void fail(int job_rank, const std::string& message);
  // The same for a failure learned elsewhere; does not throw.
  void fail_from_outside(int job_rank, const std::string& message);
  // An error that is not a peer's fault left transfers half done: closes, so later
  // calls throw ShutdownError, and rethrows `error`.
  [[noreturn]] void fail_locally(std::exception_ptr error);
  // As fail_locally, without an error in hand and without throwing.
  void stop();

 private:
  std::exception_ptr record_failure(int job_rank, const std::string& message);
  void stop_with(const std::string& detail);

  const std::string name_;
  FailureVerdict verdict_;
  const std::function<void()> close_hard_;
  std::mutex mutex_;
  bool aborted_ = false;
  std::string abort_reason_;
  std::exception_ptr failure_;
};

// Runs a collective's body on a mesh. Errors the mesh already handled, and
// arguments rejected before anything was posted, pass through; anything else
// may leave transfers half done, so the mesh is closed (mesh.fail_locally,
// which rethrows) before the error goes up.
template <typename Mesh, typename Body>
void guarded(Mesh& mesh, Body&& body) {
  try {
    body();
  } catch (const PeerFailureError&) {
    throw;
  } catch (const ShutdownError&) {
    throw;
  } catch (const InvalidArgumentError&) {
    throw;
  } catch (...) {
    mesh.fail_locally(std::current_exception());
  }
}

}  // namespace kolo::comm::direct
