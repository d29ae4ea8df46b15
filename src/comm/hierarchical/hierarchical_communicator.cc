#include "comm/hierarchical/hierarchical_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <numeric>
#include <vector>

#include "comm/hierarchical/self_sized_pack.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using hierarchical::max_pack_bytes;
using hierarchical::pack_blocks;
using hierarchical::unpack_blocks;

enum class Part { Local, Cross, Flat };

class HierarchicalCommunicator final : public Communicator {
 public:
  HierarchicalCommunicator(const HostLayout& layout, std::unique_ptr<Communicator> local,
                           std::unique_ptr<MeshCommunicator> cross, std::unique_ptr<MeshCommunicator> flat,
                           FailureVerdict verdict)
      : layout_(layout),
        local_(std::move(local)),
        cross_(std::move(cross)),
        flat_(std::move(flat)),
        verdict_(std::move(verdict)) {
    if (local_->size() != layout_.local_size || local_->rank() != layout_.local_rank ||
        cross_->size() != layout_.cross_size || cross_->rank() != layout_.cross_rank ||
        flat_->size() != layout_.local_size * layout_.cross_size ||
        flat_->rank() != layout_.cross_rank * layout_.local_size + layout_.local_rank ||
        (!layout_.job_ranks.empty() && static_cast<int>(layout_.job_ranks.size()) != flat_->size()))
      throw InvalidArgumentError("hierarchical communicator: the local, cross and flat communicators do not match "
                                 "the host layout");
    capabilities_ = composed_capabilities();
  }

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string name() const override { return "hierarchical"; }

  // The output, when shareable, keeps its placement for the host's last step (an
  // allgatherv into it, which the shm communicator does in place of it). With
  // one rank per host the host's steps would only copy the whole buffer twice:
  // the ranks' own allreduce across hosts is the whole call (the same bits).
  // The host's shard is scaled where the hosts reduce it, before the host's
  // ranks gather it.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale = {}, Placement placement = {}) override {
    const int L = layout_.local_size;
    if (L == 1) return run(Part::Cross, [&] { cross_->allreduce(send, recv, count, dtype, op, scale); });
    const std::size_t es = element_size(dtype);
    through_shards(count, dtype, op, scale, [&](const std::vector<std::size_t>& counts) {
      local_->reduce_scatter(send, shard_.data(), counts, dtype, op);
    }, [&](const std::vector<std::size_t>& counts) {
      std::vector<std::size_t> bytes(L);
      for (int j = 0; j < L; ++j) bytes[j] = counts[j] * es;
      local_->allgatherv(shard_.data(), bytes[layout_.local_rank], recv, bytes, {nullptr, placement.recv});
    });
  }

  // A fused batch takes the same three steps with the host's steps reading from
  // and writing into the tensors (a transport without list steps of its own
  // stages them); with one rank per host, the cross communicator's own list
  // path, when it has one.
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                         const ResultScale& scale) override {
    if (layout_.local_size == 1) {
      if (!cross_->capabilities().reduces_regions) return Communicator::allreduce_regions(regions, dtype, op, scale);
      return run(Part::Cross, [&] { cross_->allreduce_regions(regions, dtype, op, scale); });
    }
    through_shards(RegionList(regions, element_size(dtype)).count(), dtype, op, scale,
                   [&](const std::vector<std::size_t>& counts) {
                     local_->reduce_scatter_regions(regions, shard_.data(), counts, dtype, op);
                   },
                   [&](const std::vector<std::size_t>& counts) {
                     local_->allgather_regions(shard_.data(), regions, counts, dtype);
                   });
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  Placement placement = {}) override {
    if (recv_bytes.size() != static_cast<std::size_t>(size()))
      throw InvalidArgumentError("allgatherv: expected one size per rank (" + std::to_string(size()) + "), got " +
                                 std::to_string(recv_bytes.size()));
    const int L = layout_.local_size, C = layout_.cross_size;
    if (L == 1) return run(Part::Cross, [&] { cross_->allgatherv(send, send_bytes, recv, recv_bytes); });
    std::vector<std::size_t> host_bytes(C, 0);
    for (int r = 0; r < size(); ++r) host_bytes[r / L] += recv_bytes[r];
    const std::size_t host_offset =
        std::accumulate(host_bytes.begin(), host_bytes.begin() + layout_.cross_rank, std::size_t{0});
    const std::size_t total = std::accumulate(host_bytes.begin(), host_bytes.end(), std::size_t{0});
    auto* out = static_cast<std::byte*>(recv);
    run(Part::Local, [&] {
      local_->allgatherv(send, send_bytes, out + host_offset, recv_bytes.subspan(layout_.cross_rank * L, L),
                         placement);
    });
    if (layout_.local_rank == 0)
      run(Part::Cross, [&] { cross_->allgatherv(out + host_offset, host_bytes[layout_.cross_rank], out, host_bytes); });
    run(Part::Local, [&] { local_->broadcast(out, total, 0); });
  }

  Capabilities capabilities() const override { return capabilities_; }

  std::vector<SharedSetting> shared_settings() const override {
    std::vector<SharedSetting> all;
    const Communicator* parts[] = {local_.get(), cross_.get(), flat_.get()};
    for (const Communicator* part : parts) {
      for (auto& setting : part->shared_settings()) {
        const bool seen = std::any_of(all.begin(), all.end(), [&](const auto& s) { return s.name == setting.name; });
        if (!seen) all.push_back(std::move(setting));
      }
    }
    return all;
  }

  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    if (max_block > capabilities_.unpadded_block_bytes)
      return Communicator::allgather_self_sized(send, recv, max_block);
    const int L = layout_.local_size, C = layout_.cross_size, host = layout_.cross_rank, n = size();
    const bool leader = layout_.local_rank == 0;
    auto* out = static_cast<std::byte*>(recv);
    run(Part::Local, [&] {
      local_->allgather_self_sized(send, out + static_cast<std::size_t>(host) * L * max_block, max_block);
    });
    if (C > 1 && leader) {
      const std::size_t host_pack = max_pack_bytes(static_cast<std::size_t>(L), max_block);
      pack_blocks(out, host * L, L, max_block, pack_);
      packs_.resize(static_cast<std::size_t>(C) * host_pack);
      run(Part::Cross, [&] { cross_->allgather_self_sized(pack_.data(), packs_.data(), host_pack); });
      for (int h = 0; h < C; ++h) {
        if (h != host)
          unpack_blocks(packs_.data() + static_cast<std::size_t>(h) * host_pack, host_pack, h * L, L, max_block, out,
                        job_rank(Part::Cross, h));
      }
    }
    if (C == 1 || L == 1) return;
    const std::size_t job_pack = max_pack_bytes(static_cast<std::size_t>(n), max_block);
    if (leader) {
      pack_blocks(out, 0, n, max_block, pack_);
    } else {
      pack_.resize(job_pack);
      const std::uint32_t empty = sizeof empty;
      std::memcpy(pack_.data(), &empty, sizeof empty);
    }
    packs_.resize(static_cast<std::size_t>(L) * job_pack);
    run(Part::Local, [&] { local_->allgather_self_sized(pack_.data(), packs_.data(), job_pack); });
    if (!leader) unpack_blocks(packs_.data(), job_pack, 0, n, max_block, out, job_rank(Part::Local, 0));
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    if (root < 0 || root >= size())
      throw InvalidArgumentError("broadcast: root rank " + std::to_string(root) + " is not below " +
                                 std::to_string(size()));
    const int root_host = root / layout_.local_size, root_local = root % layout_.local_size;
    if (layout_.local_rank == root_local) run(Part::Cross, [&] { cross_->broadcast(buffer, bytes, root_host); });
    run(Part::Local, [&] { local_->broadcast(buffer, bytes, root_local); });
  }

  void barrier() override {
    run(Part::Local, [&] { local_->barrier(); });
    if (layout_.local_rank == 0) run(Part::Cross, [&] { cross_->barrier(); });
    run(Part::Local, [&] { local_->barrier(); });
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    run(Part::Flat, [&] { flat_->reduce_scatter(send, recv, recv_counts, dtype, op); });
  }
  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    run(Part::Flat, [&] { flat_->gatherv(send, send_bytes, recv, recv_bytes, root); });
  }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    run(Part::Flat, [&] { flat_->alltoallv(send, send_bytes, recv, recv_bytes); });
  }

  void abort(const std::string& reason) override {
    local_->abort(reason);
    cross_->abort(reason);
    flat_->abort(reason);
  }

 private:
  Capabilities composed_capabilities() const {
    const Capabilities local = local_->capabilities(), cross = cross_->capabilities();
    Capabilities c;
    c.reduces_regions = layout_.local_size > 1 || cross.reduces_regions;
    // Only the bytes each block uses move wherever the parts move only those:
    // the blocks gather in the host, the leaders swap their hosts' blocks packed
    // end to end, and each leader hands the whole job's pack to its host in one
    // more self-sized step, in which the others offer empty packs.
    constexpr std::size_t kAny = std::numeric_limits<std::size_t>::max();
    const auto per_block = [](std::size_t unpadded, std::size_t blocks) {
      const std::size_t room = max_pack_bytes(0, 0);
      return unpadded > room ? (unpadded - room) / blocks : 0;
    };
    const auto n = static_cast<std::size_t>(size()), L = static_cast<std::size_t>(layout_.local_size);
    const std::size_t through_host = L == 1 ? kAny : per_block(local.unpadded_block_bytes, n);
    const std::size_t across = layout_.cross_size == 1 ? kAny : per_block(cross.unpadded_block_bytes, L);
    c.unpadded_block_bytes = std::min(through_host, across);
    // Carrying an operation moves each input once through its host and each
    // host's inputs once across: the parts' own defaults bound it.
    std::size_t bytes = kAny;
    if (layout_.local_size > 1) bytes = std::min(bytes, local.eager_bytes_default);
    if (layout_.cross_size > 1) bytes = std::min(bytes, cross.eager_bytes_default);
    if (c.unpadded_block_bytes != 0 && bytes != kAny)
      c.eager_bytes_default = std::max(c.eager_bytes_default, std::min(bytes, c.unpadded_block_bytes / 4 / 8 * 8));
    return c;
  }

  // An allreduce of `count` elements with several ranks per host: `reduce(counts)`
  // reduce-scatters the host's inputs into this rank's shard_ (counts: the
  // host's ranks' shares, in local rank order), the hosts allreduce and scale
  // each shard, and `gather(counts)` hands the shards to the host's outputs.
  template <class Reduce, class Gather>
  void through_shards(std::size_t count, DataType dtype, ReduceOp op, const ResultScale& scale, Reduce&& reduce,
                      Gather&& gather) {
    const auto L = static_cast<std::size_t>(layout_.local_size);
    std::vector<std::size_t> counts(L, count / L);
    for (std::size_t j = 0; j < count % L; ++j) ++counts[j];
    const std::size_t mine = counts[static_cast<std::size_t>(layout_.local_rank)];
    shard_.resize(mine * element_size(dtype));
    run(Part::Local, [&] { reduce(counts); });
    run(Part::Cross, [&] { cross_->allreduce(shard_.data(), shard_.data(), mine, dtype, op, scale, {}); });
    run(Part::Local, [&] { gather(counts); });
  }

  // The job rank of a part's rank: the parts' own numbers are this
  // communicator's, host by host, and those are the job's unless it serves some
  // of the job's ranks (layout_.job_ranks).
  int job_rank(Part part, int part_rank) const {
    if (part_rank < 0) return -1;
    int rank = part_rank;
    switch (part) {
      case Part::Local: rank = layout_.cross_rank * layout_.local_size + part_rank; break;
      case Part::Cross: rank = part_rank * layout_.local_size + layout_.local_rank; break;
      case Part::Flat: break;
    }
    const auto& ranks = layout_.job_ranks;
    return rank < static_cast<int>(ranks.size()) ? ranks[static_cast<std::size_t>(rank)] : rank;
  }

  template <typename Body>
  void run(Part part, Body&& body) {
    {
      std::lock_guard lock(mutex_);
      if (failure_) std::rethrow_exception(failure_);
    }
    try {
      body();
    } catch (const PeerFailureError& e) {
      // The parts across hosts already name job ranks (their groups carry the
      // job's numbering); the host's part numbers its own ranks.
      spread_failure(part == Part::Local ? job_rank(Part::Local, e.peer_rank()) : e.peer_rank(), e.what());
    }
  }

  [[noreturn]] void spread_failure(int culprit, const std::string& message) {
    auto [rank, verdict] = verdict_.claim(culprit, message);
    auto error = std::make_exception_ptr(PeerFailureError(rank, verdict));
    {
      std::lock_guard lock(mutex_);
      if (!failure_) failure_ = error;
    }
    local_->abort(verdict);
    cross_->fail_peer(rank, verdict);
    flat_->fail_peer(rank, verdict);
    std::rethrow_exception(error);
  }

  HostLayout layout_;
  Capabilities capabilities_;
  std::unique_ptr<Communicator> local_;
  std::unique_ptr<MeshCommunicator> cross_;
  std::unique_ptr<MeshCommunicator> flat_;
  FailureVerdict verdict_;
  std::vector<std::byte> shard_;
  // allgather_self_sized's packs, kept across calls (the negotiation step runs it every cycle).
  std::vector<std::byte> pack_, packs_;
  std::mutex mutex_;
  std::exception_ptr failure_;
};

}  // namespace

std::unique_ptr<Communicator> make_hierarchical_communicator(const HostLayout& layout,
                                                             std::unique_ptr<Communicator> local,
                                                             std::unique_ptr<MeshCommunicator> cross,
                                                             std::unique_ptr<MeshCommunicator> flat,
                                                             FailureVerdict verdict) {
  return std::make_unique<HierarchicalCommunicator>(layout, std::move(local), std::move(cross), std::move(flat),
                                                    std::move(verdict));
}

}  // namespace kolo::comm
