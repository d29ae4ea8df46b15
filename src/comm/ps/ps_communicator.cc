#include "comm/ps/ps_communicator.h"

#include <algorithm>
#include <vector>

#include "comm/direct/failure_state.h"
#include "comm/ps/ps_protocol.h"
#include "comm/tcp/tcp_mesh.h"
#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::comm::ps {
namespace {

// How long a worker at its orderly end may take to tell the servers.
constexpr std::chrono::milliseconds kByeLimit{2000};

class PsCommunicator final : public Communicator {
 public:
  PsCommunicator(std::unique_ptr<Communicator> workers, const MeshGroup& group, const PsSettings& settings,
                 store::StoreClient& store, const MeshNetwork& network, const CommunicatorOptions& options,
                 const std::string& secret)
      : workers_(std::move(workers)),
        plan_{settings.servers, settings.partition_bytes},
        mesh_(group, store, network, options, secret) {}

  ~PsCommunicator() override {
    const EncodedHeader bye = encode(PushHeader{.kind = Kind::Bye});
    mesh_.send_final(bye.data(), bye.size(), kByeLimit);
  }

  int rank() const override { return workers_->rank(); }
  int size() const override { return workers_->size(); }
  std::string name() const override { return "ps"; }
  Communicator& among_ranks() override { return *workers_; }
  // A worker that cut calls into other partitions, or sent them to other
  // servers, would push out of step with the rest.
  std::vector<SharedSetting> shared_settings() const override {
    auto settings = workers_->shared_settings();
    settings.push_back({kNumServers.name, static_cast<std::int64_t>(plan_.servers)});
    settings.push_back({kPartitionBytes.name, static_cast<std::int64_t>(plan_.partition_bytes)});
    return settings;
  }

  // Through the servers the data is copied whatever memory it lies in. The
  // servers scale each partition as they reduce it.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale = {}, Placement = {}) override {
    if (op == ReduceOp::Average)
      throw InvalidArgumentError("ps communicator: allreduce takes Sum, Min, Max or Product (the engine divides)");
    element_size(dtype);  // an invalid dtype throws here, before anything is posted
    const std::uint64_t call = calls_++;
    if (count == 0) return;
    direct::guarded(mesh_, [&] {
      push_and_pull(call, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dtype, op, scale);
    });
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    workers_->reduce_scatter(send, recv, recv_counts, dtype, op);
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  Placement placement = {}) override {
    workers_->allgatherv(send, send_bytes, recv, recv_bytes, placement);
  }
  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    workers_->allgather_self_sized(send, recv, max_block);
  }
  // Only what the workers' communicator does for the collectives it carries
  // (allreduce goes to the servers, staged).
  Capabilities capabilities() const override {
    return {.unpadded_block_bytes = workers_->capabilities().unpadded_block_bytes};
  }
  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    workers_->gatherv(send, send_bytes, recv, recv_bytes, root);
  }
  void broadcast(void* buffer, std::size_t bytes, int root) override { workers_->broadcast(buffer, bytes, root); }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    workers_->alltoallv(send, send_bytes, recv, recv_bytes);
  }
  void barrier() override { workers_->barrier(); }

  void abort(const std::string& reason) override {
    workers_->abort(reason);
    mesh_.abort(reason);
  }

 private:
  // Every partition goes out at once (its header and data to its owner), and its
  // result comes back into `recv`. In place is safe: a server answers a
  // partition only after it has all of this worker's push of it.
  void push_and_pull(std::uint64_t call, const std::byte* send, std::byte* recv, std::size_t count, DataType dtype,
                     ReduceOp op, const ResultScale& scale) {
    mesh_.check_usable();
    const std::size_t esize = element_size(dtype);
    const std::size_t per = plan_.elements_per_partition(dtype);
    const std::size_t partitions = (count + per - 1) / per;
    headers_.resize(partitions);
    tcp::Exchange exchange(mesh_, "an allreduce through the parameter servers");
    for (std::size_t p = 0; p < partitions; ++p) {
      const std::size_t first = p * per;
      const std::size_t n = std::min(per, count - first);
      const auto index = static_cast<std::uint32_t>(p);
      headers_[p] = encode(PushHeader{Kind::Push, dtype, op, call, index, n, scale});
      const int server = plan_.owner(call, index);
      exchange.send(server, headers_[p].data(), headers_[p].size());
      exchange.send(server, send + first * esize, n * esize);
      exchange.recv(server, recv + first * esize, n * esize);
    }
    exchange.wait();
  }

  std::unique_ptr<Communicator> workers_;
  const PartitionPlan plan_;
  tcp::Mesh mesh_;
  std::uint64_t calls_ = 0;
  std::vector<EncodedHeader> headers_;  // live until the exchange is done
};

}  // namespace

MeshGroup server_group(int generation, int servers, int workers, int member) {
  MeshGroup group;
  group.rank = member;
  group.size = servers + workers;
  group.servers = servers;
  const std::string generation_prefix = "comm/" + std::to_string(generation) + "/";
  group.key_prefix = generation_prefix + "ps/";
  group.verdict_prefix = generation_prefix + "failure/";
  group.job_ranks.assign(static_cast<std::size_t>(servers), -1);
  for (int r = 0; r < workers; ++r) group.job_ranks.push_back(r);
  return group;
}

std::unique_ptr<Communicator> make_ps_communicator(std::unique_ptr<Communicator> workers, int generation,
                                                   const PsSettings& settings, store::StoreClient& store,
                                                   const MeshNetwork& network, const CommunicatorOptions& options,
                                                   const std::string& secret) {
  if (settings.servers < 1) throw InvalidArgumentError("parameter-server mode needs at least one server");
  const MeshGroup group =
      server_group(generation, settings.servers, workers->size(), settings.servers + workers->rank());
  auto comm = std::make_unique<PsCommunicator>(std::move(workers), group, settings, store, network, options, secret);
  KOLO_LOG(Debug, "ps: worker " << comm->rank() << " connected to " << settings.servers << " server(s)");
  return comm;
}

}  // namespace kolo::comm::ps
