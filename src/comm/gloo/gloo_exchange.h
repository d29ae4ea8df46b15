// One batch of point-to-point transfers over a gloo mesh, posted together and
// waited for together: the building block of every gloo collective.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

#include "comm/gloo/gloo_mesh.h"

namespace kolo::comm::gloo_impl {

// Messages between two ranks are matched by the batch's slot, in posting order,
// so both sides must post the same sequence of batches (they derive it from the
// collective's arguments, which agree on every rank). Zero-byte transfers are
// skipped on both sides for the same reason.
class Exchange {
 public:
  // `what` names the collective in error messages.
  Exchange(Mesh& mesh, const char* what);
  ~Exchange();
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void send(int peer, const void* data, std::size_t bytes);
  void recv(int peer, void* data, std::size_t bytes);
  // Waits for every posted transfer, each within the peer timeout. Throws
  // PeerFailureError naming the peer (Mesh::fail) or ShutdownError after abort().
  void wait();

 private:
  struct Transfer {
    int peer;
    bool is_send;
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
  };
  void post(int peer, bool is_send, void* data, std::size_t bytes);

  Mesh& mesh_;
  const char* what_;
  std::uint64_t slot_;
  std::vector<Transfer> transfers_;
};

}  // namespace kolo::comm::gloo_impl
