#include "comm/hierarchical/hierarchical_communicator.h"

#include <numeric>
#include <vector>

#include "kolo/error.h"

namespace kolo::comm {
namespace {

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(const HostLayout& layout, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> cross, std::unique_ptr<Communicator> flat)
      : layout_(layout), local_(std::move(local)), cross_(std::move(cross)), flat_(std::move(flat)) {
    if (local_->size() != layout_.local_size || local_->rank() != layout_.local_rank ||
        cross_->size() != layout_.cross_size || cross_->rank() != layout_.cross_rank ||
        flat_->size() != layout_.local_size * layout_.cross_size ||
        flat_->rank() != layout_.cross_rank * layout_.local_size + layout_.local_rank)
      throw InvalidArgumentError("hierarchical communicator: the local, cross and flat communicators do not match "
                                 "the host layout");
  }

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string name() const override { return "hierarchical"; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) override {
    const int L = layout_.local_size, me = layout_.local_rank;
    const std::size_t es = element_size(dtype);
    std::vector<std::size_t> counts(L, count / L);
    for (std::size_t j = 0; j < count % L; ++j) ++counts[j];
    std::vector<std::size_t> bytes(L);
    for (int j = 0; j < L; ++j) bytes[j] = counts[j] * es;
    shard_.resize(bytes[me]);
    local_->reduce_scatter(send, shard_.data(), counts, dtype, op);
    cross_->allreduce(shard_.data(), shard_.data(), counts[me], dtype, op);
    local_->allgatherv(shard_.data(), bytes[me], recv, bytes);
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv,
                  std::span<const std::size_t> recv_bytes) override {
    check_sizes(recv_bytes.size(), "allgatherv");
    const int L = layout_.local_size, C = layout_.cross_size;
    std::vector<std::size_t> host_bytes(C, 0);
    for (int r = 0; r < size(); ++r) host_bytes[r / L] += recv_bytes[r];
    const std::size_t host_offset =
        std::accumulate(host_bytes.begin(), host_bytes.begin() + layout_.cross_rank, std::size_t{0});
    const std::size_t total = std::accumulate(host_bytes.begin(), host_bytes.end(), std::size_t{0});
    auto* out = static_cast<std::byte*>(recv);
    local_->allgatherv(send, send_bytes, out + host_offset, recv_bytes.subspan(layout_.cross_rank * L, L));
    if (layout_.local_rank == 0) cross_->allgatherv(out + host_offset, host_bytes[layout_.cross_rank], out, host_bytes);
    local_->broadcast(out, total, 0);
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    if (root < 0 || root >= size())
      throw InvalidArgumentError("broadcast: root rank " + std::to_string(root) + " is not below " +
                                 std::to_string(size()));
    const int root_host = root / layout_.local_size, root_local = root % layout_.local_size;
    if (layout_.local_rank == root_local) cross_->broadcast(buffer, bytes, root_host);
    local_->broadcast(buffer, bytes, root_local);
  }

  void barrier() override {
    local_->barrier();
    if (layout_.local_rank == 0) cross_->barrier();
    local_->barrier();
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    flat_->reduce_scatter(send, recv, recv_counts, dtype, op);
  }
  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    flat_->gatherv(send, send_bytes, recv, recv_bytes, root);
  }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    flat_->alltoallv(send, send_bytes, recv, recv_bytes);
  }

  void abort(const std::string& reason) override {
    local_->abort(reason);
    cross_->abort(reason);
    flat_->abort(reason);
  }

 private:
  void check_sizes(std::size_t got, const char* what) const {
    if (got != static_cast<std::size_t>(size()))
      throw InvalidArgumentError(std::string(what) + ": expected one size per rank (" + std::to_string(size()) +
                                 "), got " + std::to_string(got));
  }

  HostLayout layout_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> cross_;
  std::unique_ptr<Communicator> flat_;
  std::vector<std::byte> shard_;
};

}  // namespace

std::unique_ptr<Communicator> make_hierarchical_communicator(const HostLayout& layout,
                                                             std::unique_ptr<Communicator> local,
                                                             std::unique_ptr<Communicator> cross,
                                                             std::unique_ptr<Communicator> flat) {
  return std::make_unique<HierarchicalCommunicator>(layout, std::move(local), std::move(cross), std::move(flat));
}

}  // namespace kolo::comm
