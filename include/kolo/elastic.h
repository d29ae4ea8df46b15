// Elastic training: a job kolorun runs with --min-np (and --max-np, -H or a host
// discovery script) survives lost workers and takes in new ones. When a worker
// fails, the others' pending operations fail with PeerFailureError; each then
// calls reset(), which re-forms the job in place under a new generation: ranks
// renumbered with the oldest survivors first, the communicator rebuilt, process
// sets gone. No survivor restarts or loses memory; a State holds what training
// must keep, and run() does the rest:
//
//   MyState state(...);                  // save(), restore(), sync() of the model
//   kolo::elastic::run(state, [&] {
//     for (; state.epoch < epochs; ++state.epoch) { ...; state.commit(); }
//   });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kolo/error.h"

namespace kolo::elastic {

// True in a job kolorun started in elastic mode.
bool enabled();

// Ends this rank's session and joins the job's newest membership (init() again):
// after a PeerFailureError, or when hosts_updated() says so. Outside an elastic
// job: shutdown() then init(). Throws ShutdownError when kolorun removed this
// worker from the job, TimeoutError when the job does not re-form within
// KOLO_ELASTIC_TIMEOUT.
void reset();

// A new worker (kolorun started it for a slot the job gained) is not taken in
// at init(): init() returns at once with the place the worker is planned to
// have (rank(), size(), local_rank() as they will most likely be), so that the
// others go on training while it builds its model. It says it is ready, and
// waits for the job to re-form with it, at its first collective or here,
// whichever comes first; run() calls this before its first sync. True when the
// place it got differs from the plan (workers joined or left meanwhile): what
// was built from rank() and size() must be reset, and run() calls on_reset().
// False, at once, in every other case.
bool admit();

// True on a worker that joined a running job and is not yet taken in (its
// init() returned with the planned place). What it allocates before admit(),
// the others do not wait for: run() has the state make room for what the first
// sync will bring (State::prepare_to_join) before it asks to be taken in.
bool awaits_admission();

// True when the job has a newer membership (workers were added) and this rank
// must reset. Every rank that has completed the same collectives gives the same
// answer, so all of them reset at the same step; it runs no collective.
bool hosts_updated();

// Thrown by State::check_host_updates() so that run() resets without restoring.
class HostsUpdatedInterrupt : public Error {
 public:
  explicit HostsUpdatedInterrupt(bool skip_sync = false)
      : Error("kolo elastic: the job's hosts changed; resetting"), skip_sync_(skip_sync) {}
  bool skip_sync() const { return skip_sync_; }

 private:
  bool skip_sync_;
};

// What training keeps across resets. commit() saves it (and checks for host
// updates), restore() goes back to the last save, sync() makes every rank's
// equal to rank 0's. Contracts for implementations:
//  - save() runs on every rank at the same step (commit() does), so it may run
//    collectives (merging what each rank's sampler processed, say); a failure
//    inside it must leave the last save whole.
//  - sync() ends with a local save, so that a failure before the next commit
//    restores rank 0's state, not this rank's own from before the sync.
//  - reset() adapts the state to the new ranks (a sampler re-splits its
//    indices); on_reset() calls it, then the callbacks.
// Not copyable: callbacks usually hold the state itself.
class State {
 public:
  State() = default;
  State(const State&) = delete;
  State& operator=(const State&) = delete;
  virtual ~State() = default;
  virtual void save() = 0;
  virtual void restore() = 0;
  virtual void sync() = 0;
  virtual void reset() {}
  // On a worker that joins a running job, before it is taken in (run() calls
  // it while awaits_admission()): allocate what the first sync will fill, while
  // the others still train. Nothing by default; TorchState (C++) does nothing
  // either (Python's makes its optimizer's receive tensors).
  virtual void prepare_to_join() {}

  void commit() {
    save();
    check_host_updates();
  }
  // Throws HostsUpdatedInterrupt when hosts_updated().
  void check_host_updates();
  // Called, in order, after every reset (after reset(), before sync()).
  void register_reset_callbacks(std::vector<std::function<void()>> callbacks);
  void on_reset();

 private:
  std::vector<std::function<void()>> reset_callbacks_;
};

// For sync() implementations that send only what differs: after a failure
// the survivors already hold the same commit, and only joiners (or a rank
// whose last commit is a step behind) need rank 0's. digest() summarizes a
// buffer in 64 bits (equal bytes, equal digests; any other difference is missed
// with a chance of about 2^-64; not for what an adversary chooses).
// differ_from_rank_0() takes this rank's digest of each item and says, for
// each, whether any rank's differs from rank 0's: the same answer on every
// rank, from two small collectives named after `name`. Every rank must pass as
// many digests (else MismatchError).
std::uint64_t digest(const void* data, std::size_t size);
std::vector<bool> differ_from_rank_0(const std::vector<std::uint64_t>& digests, const std::string& name);

// Runs `train` until it returns: takes a new worker in (admit(), then
// on_reset() when its place is not the planned one) and syncs the state
// first; an error of the job
// (any kolo::Error but InvalidArgumentError and MismatchError, which are the
// program's) restores the last commit, resets and runs it again; a
// HostsUpdatedInterrupt resets and runs it again from where the state is.
// Errors of reset() itself (this worker removed, the job gone) pass through,
// as do all others. kolo.torch.elastic.run has the same rule.
void run(State& state, const std::function<void()>& train);

}  // namespace kolo::elastic
