#include "comm/tcp/tcp_communicator.h"

#include <cstring>
#include <limits>
#include <vector>

#include "comm/direct/direct_communicator.h"
#include "comm/tcp/tcp_mesh.h"

namespace kolo::comm {
namespace {

class TcpCommunicator final : public direct::DirectCommunicator<tcp::Mesh> {
 public:
  using DirectCommunicator::DirectCommunicator;

  // A fused batch moves straight from and into its tensors, a message per
  // tensor a round's piece spans, instead of through a staging buffer (two more
  // passes over every gradient); gloo keeps the staging: each of its messages
  // costs a ready notification and a thread wake-up. Frames carry their length,
  // so a self-sized block moves only its used bytes, whatever max_block is. Up
  // to 64 KiB (Tuning::small_bytes) the allreduce itself sends every rank's
  // whole input to every peer, which is what the step moves when it carries the
  // operation: carrying saves the second round trip at no cost in bytes.
  Capabilities capabilities() const override {
    return {.reduces_regions = true,
            .unpadded_block_bytes = std::numeric_limits<std::uint32_t>::max(),
            .eager_bytes_default = 64 << 10};
  }
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                         const ResultScale& scale) override {
    guarded([&] { collectives_.allreduce_regions(regions, dtype, op, scale); });
  }

  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    const std::uint32_t length = self_sized_length(send, max_block, rank());
    guarded([&] { exchange_self_sized(send, length, static_cast<std::byte*>(recv), max_block); });
    for (int r = 0; r < size(); ++r)
      self_sized_length(static_cast<const std::byte*>(recv) + static_cast<std::size_t>(r) * max_block, max_block, r);
  }

 private:
  void exchange_self_sized(const void* send, std::size_t length, std::byte* recv, std::size_t max_block) {
    mesh_.check_usable();
    const int n = size(), me = rank();
    std::memmove(recv + static_cast<std::size_t>(me) * max_block, send, length);
    if (n == 1) return;
    got_.assign(static_cast<std::size_t>(n), 0);
    tcp::Exchange exchange(mesh_, "the negotiation step");
    for (int k = 0; k < n; ++k) {
      if (k == me) continue;
      exchange.recv_any(k, recv + static_cast<std::size_t>(k) * max_block, max_block, &got_[k]);
      exchange.send_always(k, send, length);
    }
    exchange.wait();
  }

  std::vector<std::size_t> got_;
};

}  // namespace

std::unique_ptr<MeshCommunicator> make_tcp_communicator(const MeshGroup& group, store::StoreClient& store,
                                                        const MeshNetwork& network, const CommunicatorOptions& options,
                                                        const std::string& secret) {
  direct::Tuning tuning;
  tuning.round_bytes = 0;  // sized by the rank count (Tuning::kAutoRoundBytes)
  return std::make_unique<TcpCommunicator>("tcp", "KOLO_TCP", tuning, group, store, network, options, secret);
}

}  // namespace kolo::comm
