// What kolo's direct collectives (direct_collectives.h) need from a transport:
// batches of point-to-point transfers between the ranks of a fully connected
// group, posted together and waited for together.
#pragma once

#include <cstddef>
#include <memory>

namespace kolo::comm::direct {

// Messages between two ranks are matched in posting order, batch after batch, so
// both sides must post the same sequence (they derive it from the collective's
// arguments, which agree on every rank). Zero-byte transfers are skipped on both
// sides for the same reason. Buffers must stay valid until wait() returns.
class Batch {
 public:
  virtual ~Batch() = default;
  virtual void send(int peer, const void* data, std::size_t bytes) = 0;
  virtual void recv(int peer, void* data, std::size_t bytes) = 0;
  // Waits for every posted transfer, each within the peer timeout. Throws
  // PeerFailureError naming the peer, or ShutdownError after abort().
  virtual void wait() = 0;
};

class Links {
 public:
  virtual ~Links() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Throws the recorded failure, or ShutdownError after abort().
  virtual void check_usable() = 0;
  // An empty batch; `what` names the collective in error messages.
  virtual std::unique_ptr<Batch> batch(const char* what) = 0;
  // Moves what the posted transfers can move without waiting. A transport driven
  // by the calling thread needs it between the pieces of long local work (a
  // reduction), so that its connections stay busy meanwhile; one with a progress
  // thread of its own does nothing.
  virtual void progress() {}
};

}  // namespace kolo::comm::direct
