// A connected gloo full mesh plus the failure state every collective shares.
//
// FAILURE. The first error a rank sees (a peer's connection closed or reset, a
// wait past the peer timeout, an error raised by gloo) is fatal for the mesh: the
// rank offers its judgement to the job-wide verdict (failure_verdict.h), closes
// all its connections hard (so every peer waiting on it wakes at once with a
// reset, which cascades through the job), and throws PeerFailureError with the
// verdict, so that all ranks name the rank that failed first rather than the
// neighbour that closed on them. Later calls rethrow the same error.
//
// ABORT. abort() never blocks and never touches the network: it marks the mesh
// aborted and wakes every wait in progress (gloo's abortWaitRecv/abortWaitSend on
// each live buffer); waits return early and the call throws ShutdownError. The
// connections are closed softly when the communicator is destroyed, so a normal
// shutdown, where every rank aborts right after the last collective, never cuts
// data still in flight to a slower peer.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "comm/communicator.h"
#include "comm/direct/failure_state.h"
#include "comm/direct/point_to_point.h"
#include "comm/gloo/connection_watch.h"
#include "comm/mesh/mesh_communicator.h"
#include "store/store.h"

namespace kolo::comm::gloo_impl {

class Mesh final : public direct::Links {
 public:
  Mesh(const MeshGroup& group, store::StoreClient& store, const MeshNetwork& network,
       const CommunicatorOptions& options);
  ~Mesh() override;
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::unique_ptr<direct::Batch> batch(const char* what) override;
  std::chrono::milliseconds peer_timeout() const { return peer_timeout_; }

  // A fresh tag for one batch of transfers; every rank draws the same sequence.
  std::uint64_t next_slot() { return next_slot_++; }

  // A buffer over caller memory, registered so that abort() can wake its waits.
  // Throws ShutdownError after abort(), the recorded error after a failure.
  std::unique_ptr<::gloo::transport::UnboundBuffer> make_buffer(void* data, std::size_t bytes);
  void release_buffer(::gloo::transport::UnboundBuffer* buffer);
  // Waits up to the peer timeout for `buffer`'s transfer with group rank `peer`;
  // false when woken early, with `lost` set when its connection failed
  // (connection_watch.h). Throws what gloo throws.
  bool wait(::gloo::transport::UnboundBuffer& buffer, bool is_send, int peer, std::string& lost) {
    return watch_->wait(buffer, is_send, peer, peer_timeout_, lost);
  }

  // Throws the recorded failure or ShutdownError when the mesh is unusable.
  void check_usable() override { state_.check_usable(); }
  // A wait returned early: throws ShutdownError (or the recorded failure).
  [[noreturn]] void throw_interrupted() { state_.throw_interrupted(); }
  // Records group rank `peer` as failed with gloo's `detail` during `what`, closes
  // every connection and throws PeerFailureError (see FAILURE above).
  [[noreturn]] void fail(int peer, const std::string& what, const std::string& detail);
  // The same for a failure learned elsewhere (job rank `job_rank`); does not throw.
  void fail_from_outside(int job_rank, const std::string& message) { state_.fail_from_outside(job_rank, message); }
  // For errors that are not a peer's fault (a bug, a bad argument deep inside):
  // closes the mesh so no transfer is left half done, then rethrows.
  [[noreturn]] void fail_locally(std::exception_ptr error) { state_.fail_locally(error); }

  void abort(const std::string& reason);

 private:
  std::string judge(int job_rank, const std::string& what, const std::string& detail) const;
  void close_connections();

  const MeshGroup group_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds peer_timeout_;
  std::shared_ptr<::gloo::Context> context_;
  std::unique_ptr<ConnectionWatch> watch_;  // after context_: it goes first
  std::uint64_t next_slot_ = 1;
  direct::FailureState state_;

  std::mutex mutex_;  // taken before state_'s, never after
  std::unordered_set<::gloo::transport::UnboundBuffer*> live_;
};

}  // namespace kolo::comm::gloo_impl
