// One batch of point-to-point transfers over a gloo mesh (direct::Batch), each a
// gloo unbound buffer tagged with the batch's slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

#include "comm/direct/point_to_point.h"
#include "comm/gloo/gloo_mesh.h"

namespace kolo::comm::gloo_impl {

// Messages between two ranks are matched by the batch's slot, in posting order.
class Exchange final : public direct::Batch {
 public:
  // `what` names the collective in error messages.
  Exchange(Mesh& mesh, const char* what);
  ~Exchange() override;
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void send(int peer, const void* data, std::size_t bytes) override;
  void recv(int peer, void* data, std::size_t bytes) override;
  // A failure goes through Mesh::fail.
  void wait() override;

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
