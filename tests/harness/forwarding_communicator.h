// A communicator that passes every call to a real one and counts the
// collectives, so that a test can see how many synchronizations an engine path
// takes. Subclasses change one behaviour (a transport without a list path, ...).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <string>

#include "comm/communicator.h"

namespace kolo::testing {

class ForwardingCommunicator : public comm::Communicator {
 public:
  explicit ForwardingCommunicator(std::unique_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}

  // Collectives called so far (allreduce_regions counts once).
  int collectives() const { return collectives_.load(); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const comm::ResultScale& scale = {}, comm::Placement placement = {}) override {
    ++collectives_;
    inner_->allreduce(send, recv, count, dtype, op, scale, placement);
  }
  comm::Capabilities capabilities() const override { return inner_->capabilities(); }
  void allreduce_regions(std::span<const comm::Region> regions, DataType dtype, ReduceOp op,
                         const comm::ResultScale& scale) override {
    ++collectives_;
    inner_->allreduce_regions(regions, dtype, op, scale);
  }
  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> counts, DataType dtype,
                      ReduceOp op) override {
    ++collectives_;
    inner_->reduce_scatter(send, recv, counts, dtype, op);
  }
  void reduce_scatter_regions(std::span<const comm::Region> regions, void* recv, std::span<const std::size_t> counts,
                              DataType dtype, ReduceOp op) override {
    ++collectives_;
    inner_->reduce_scatter_regions(regions, recv, counts, dtype, op);
  }
  void allgather_regions(const void* send, std::span<const comm::Region> regions, std::span<const std::size_t> counts,
                         DataType dtype) override {
    ++collectives_;
    inner_->allgather_regions(send, regions, counts, dtype);
  }
  void allgatherv(const void* send, std::size_t bytes, void* recv, std::span<const std::size_t> sizes,
                  comm::Placement placement = {}) override {
    ++collectives_;
    inner_->allgatherv(send, bytes, recv, sizes, placement);
  }
  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    ++collectives_;
    inner_->allgather_self_sized(send, recv, max_block);
  }
  void gatherv(const void* send, std::size_t bytes, void* recv, std::span<const std::size_t> sizes, int root) override {
    ++collectives_;
    inner_->gatherv(send, bytes, recv, sizes, root);
  }
  void broadcast(void* buffer, std::size_t bytes, int root) override {
    ++collectives_;
    inner_->broadcast(buffer, bytes, root);
  }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    ++collectives_;
    inner_->alltoallv(send, send_bytes, recv, recv_bytes);
  }
  void barrier() override {
    ++collectives_;
    inner_->barrier();
  }
  void abort(const std::string& reason) override { inner_->abort(reason); }

 private:
  std::unique_ptr<comm::Communicator> inner_;
  std::atomic<int> collectives_{0};
};

// A transport that pads every self-sized block to its largest size (the
// default Communicator::allgather_self_sized over the inner allgatherv).
class PaddingCommunicator final : public ForwardingCommunicator {
 public:
  using ForwardingCommunicator::ForwardingCommunicator;
  comm::Capabilities capabilities() const override {
    comm::Capabilities c = ForwardingCommunicator::capabilities();
    c.unpadded_block_bytes = 0;
    c.eager_bytes_default = comm::Capabilities::kSmallEagerBytes;
    return c;
  }
  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    Communicator::allgather_self_sized(send, recv, max_block);
  }
};

}  // namespace kolo::testing
