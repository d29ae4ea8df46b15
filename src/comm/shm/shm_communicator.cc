// The shared-memory communicator.
//
// SEGMENT. One POSIX shared-memory object per job (shm_segment.cc), named by a
// hash keyed with the job's secret, "/kolo-<job tag>-<hash>-shm" (without a
// secret "/kolo-<job_id>-shm"). Rank 0 creates it (O_CREAT|O_EXCL, mode 0600:
// an existing one is an error), reserves and maps it, writes the header with
// the job's nonce and publishes a ready magic word; the other ranks retry
// shm_open/mmap until they see the magic or the connect timeout passes. Every
// rank refuses a segment that is not its user's, is open to other users or
// lacks the nonce (segment_checks.h), and says so. Every rank writes its pid into its
// control block and increments an attach counter; the rank that completes the
// count unlinks the name, so nothing is left in /dev/shm even if ranks crash
// later. Layout (shm_layout.h): a header page, one control block per rank (three
// progress counters, each on its own cache line, plus pid, state and an abort
// reason), per rank two areas of flagged lines (small messages, below), then per
// rank two data slots of `slot_bytes` each.
// Tunables: KOLO_SHM_SLOT_BYTES (default 1 MiB), KOLO_SHM_SMALL_BYTES (64 KiB),
// KOLO_SHM_MAPPED_BYTES (1 MiB), KOLO_SHM_SINGLE_COPY (auto).
//
// STEPS (shm_channel.cc). Every collective is a sequence of steps, numbered by a
// counter that all ranks advance identically (the engine guarantees that all
// ranks call the same collectives with agreeing arguments, so all ranks derive
// the same number of steps from the arguments). Step s uses slot s % 2 of every rank. Per rank three
// monotonically increasing 32-bit counters carry absolute step numbers:
//   posted   >= s+1  its slot holds its data for step s
//   reduced  >= s+1  its slot holds its reduced segment for step s (allreduce)
//   consumed >= s+1  it has read everything it needs of step s
// A rank writes its slot for step s only after every rank's consumed >= s-1
// (everyone is done with step s-2, the last user of that slot): double buffering,
// so a rank can fill step s+1 while its peers still read step s. Because values
// are absolute, a rank that has nothing to publish in a step simply skips the
// store. Comparisons are wraparound-safe ((int32)(value - target) >= 0).
// Publishing is a release store (data written before it is visible after an
// acquire load of the counter).
//
// ALGORITHMS (shm_reductions.cc, shm_transfers.cc).
// IN PLACE OF THE BUFFERS (>= mapped_bytes, when every rank's call places its
// buffers in shareable memory, as views of shareable kolo::Buffers do): no
// slots; each rank maps its peers' buffers; allreduce reduces its piece from all
// inputs into all outputs, allgatherv writes its block into every output
// (shm_in_place.h). Otherwise:
// ALLREDUCE, large (> small_bytes). The buffer is cut into chunks of one slot;
// each chunk into `size` segments (cache-line aligned), segment j owned by rank j.
// Per chunk (one step), on rank r:
//   1. copy its input for every other owner's segment into its slot; post;
//   2. as owner of segment r: wait for every peer's posted, reduce segment r over
//      all ranks IN RANK ORDER with reduce_many (its own contribution read from
//      its private input, no copy) into segment r of its own slot, scaled
//      (allreduce with a ResultScale) block by block while in L1; post reduced; copy that
//      result to its output;
//   3. for every other owner j: wait for j's reduced, copy segment j from j's
//      slot to the output; finish (consumed).
// Every element is reduced once, by its owner, in rank order, so all ranks get
// the same bits. Each rank moves ~3x its share of the data and reduces 1/size
// of it, all ranks in parallel, and phases of consecutive chunks overlap.
// FLAGGED LINES (up to kFlaggedBytes = 1792 bytes: small allreduces and
// allgathers, the engine's negotiation step). The message goes into the rank's
// flagged area as 64-byte lines of 56 data bytes plus a 64-bit flag, the number
// of the step that wrote it; the reader polls each line's flag, which arrives in
// the same cache-line transfer as the data, so the critical path is one transfer
// instead of two (counter, then data). The writer still posts afterwards: a
// reader that runs out of spin budget sleeps on that counter as usual, and a
// line still unflagged once the writer has posted means it sent less than the
// reader expects (an error, not a hang). The areas hold nothing but flagged
// lines, so a flag is never stale user data.
// Also: a peer that posted for step s had finished step s-1, so a rank learns
// its peers' progress from the data it reads and acquire_slot reads their
// consumed counters (another cache miss) only when that does not settle it.
// ALLREDUCE, small: one step: every rank copies its whole input into its slot,
// posts, waits for every peer and reduces all inputs in rank order itself (same
// kernel, same order, same bits on every rank). One synchronization instead of
// two, which is what matters for latency.
// REDUCE_SCATTER: step 1 and 2 of allreduce with per-owner sub-slots of
// slot_bytes/size; the owner writes straight to its output.
// ALLGATHERV / GATHERV / BROADCAST: per step each contributing rank copies up to
// one slot of its data in and posts; readers wait and copy out. ALLGATHERV and
// GATHERV: up to 1792 bytes (the largest contribution) in one step of flagged
// lines instead (not a broadcast: its receivers would save a transfer, but its
// root would write more lines, which makes the call slower).
// BROADCAST of more than two slots: first a step in which the root says whether
// its receivers copy straight out of its buffer (shm_single_copy.h: under CPU
// load, KOLO_SHM_SINGLE_COPY); if not, the slot path follows. ALLGATHERV whose
// largest block is more than two slots, in plain memory: the same, each rank
// reading every peer's block, when one rank is loaded.
// ALLGATHER_SELF_SIZED: each block's first flagged line carries its length; the
// rest follows in flagged lines up to 256 bytes, else in the slot.
// ALLTOALLV: a first step exchanges every rank's send and receive sizes (so that
// all ranks agree on the number of steps and a size mismatch fails on every rank
// alike); then per step rank i copies its next piece for rank j into sub-slot j
// of its slot, and rank j copies it out of sub-slot j of rank i's slot.
// BARRIER: post, wait for every peer's posted.
// In place: the buffers may be the same (or, for allgatherv / reduce_scatter,
// this rank's block of the other); other overlaps take a private copy first.
//
// WAITING (shm_channel.cc). A waiter polls the counter for up to 50 us with
// pause instructions, keeping its CPU; where there are more ranks than CPUs it
// yields between polls instead, as the peer it waits for may be queued for its
// very CPU, and the engine's thread yields after 5 us while the application
// computes beside it (common/spin_policy.h). Then it sleeps in
// FUTEX_WAIT (shared, not private: the word is in the shared mapping) in slices
// of 20 ms. A sleeper increments the counter's `sleepers` word before its last
// check; a publisher stores the counter and only calls FUTEX_WAKE when
// `sleepers` is non-zero (both sequentially consistent, so one of them sees the
// other). Between slices the waiter checks: its own abort flag (abort() also
// wakes its futex, so the call throws ShutdownError at once); the peer's state
// (closed or aborted, with the reason); whether the peer's pid still runs
// (kill(pid,0), /proc/<pid>/stat not Z/X); and whether any of the peer's counters
// moved within the peer timeout (if not, the rank furthest behind is named).
// Any of these throws PeerFailureError; the communicator is then unusable and
// every later call throws the same error. A rank whose collective failed, or
// that aborts or destroys its communicator, says so in its state word (with the
// rank it blames), so that its peers fail at once, with the reason, instead of
// after the peer timeout.
#include "comm/shm/shm_communicator.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <numeric>
#include <utility>
#include <vector>

#include "comm/shm/shm_channel.h"
#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_in_place.h"
#include "comm/shm/shm_segment.h"
#include "comm/shm/shm_single_copy.h"
#include "common/env.h"
#include "common/settings.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using shm::ShmChannel;

using settings::Kind;
using settings::Scope;

// Read by rank 0, which records them in the segment for the others.
// The segment holds 2 slots per rank: a bounded slot keeps its size from wrapping.
KOLO_SETTING(kSlotBytes, {.name = "KOLO_SHM_SLOT_BYTES", .kind = Kind::Integer, .fallback = "1M", .min = 4096,
                          .max = env::kMaxSettingBytes, .scope = Scope::RankZero,
                          .doc = "bytes of each of a rank's two pipeline slots"});
KOLO_SETTING(kSmallBytes, {.name = "KOLO_SHM_SMALL_BYTES", .kind = Kind::Integer, .fallback = "64K", .min = 0,
                           .max = env::kMaxSettingBytes, .scope = Scope::RankZero,
                           .doc = "an allreduce up to this size takes the one-step path"});
KOLO_SETTING(kMappedBytes, {.name = "KOLO_SHM_MAPPED_BYTES", .kind = Kind::Integer, .fallback = "1M", .min = 0,
                            .max = env::kMaxSettingBytes, .scope = Scope::RankZero,
                            .doc = "collectives from this size on shareable Buffers work in place"});
// Tests only: start the step counters close to 2^32 to exercise wraparound.
KOLO_SETTING(kFirstStep, {.name = "KOLO_SHM_FIRST_STEP", .kind = Kind::Integer, .fallback = "0", .min = 0,
                          .max = UINT32_MAX, .scope = Scope::RankZero,
                          .doc = "tests only: the step counters' first value"});

class ShmCommunicator final : public Communicator {
 public:
  explicit ShmCommunicator(std::unique_ptr<ShmChannel> channel)
      : channel_(std::move(channel)),
        srcs_(static_cast<std::size_t>(channel_->size())),
        run_srcs_(static_cast<std::size_t>(channel_->size())),
        exchange_(channel_->size()),
        single_copy_(channel_->single_copy_mode()) {}

  int rank() const override { return channel_->rank(); }
  int size() const override { return channel_->size(); }
  std::string name() const override { return "shm"; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale = {}, Placement placement = {}) override {
    run("allreduce", [&] {
      check_reduction(dtype, op);
      if (count * element_size(dtype) >= channel_->mapped_bytes() &&
          shm::allreduce_in_place(*channel_, exchange_, send, recv, count, dtype, op, scale, placement, srcs_)) {
        return;
      }
      const Region whole{send, recv, count};
      shm::allreduce(*channel_, RegionList({&whole, 1}, element_size(dtype)), dtype, op, scale, srcs_, run_srcs_);
    });
  }


  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                         const ResultScale& scale) override {
    run("allreduce", [&] {
      check_reduction(dtype, op);
      const RegionList list(regions, element_size(dtype));
      // The decision to try is the same on every rank (the same batch, so the
      // same total); whether this rank's regions can be worked on in place is
      // not, and the exchange tells every rank alike.
      if (list.count() * element_size(dtype) >= channel_->mapped_bytes() &&
          shm::allreduce_regions_in_place(*channel_, exchange_, regions, list, dtype, op, scale, srcs_)) {
        return;
      }
      shm::allreduce(*channel_, list, dtype, op, scale, srcs_, run_srcs_);
    });
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    run("reduce_scatter", [&] {
      check_reduction(dtype, op);
      check_per_rank(recv_counts, "recv_counts");
      const std::size_t es = element_size(dtype);
      const std::size_t total = std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
      const std::size_t own_offset =
          std::accumulate(recv_counts.begin(), recv_counts.begin() + rank(), std::size_t{0});
      // The output may be this rank's own block of the input (each element is then
      // read just before it is overwritten); any other overlap needs a copy.
      const auto* in = static_cast<const std::byte*>(send);
      auto* out = static_cast<std::byte*>(recv);
      std::vector<std::byte> private_send;
      if (shm::overlaps(in, total * es, out, recv_counts[rank()] * es) && out != in + own_offset * es) {
        private_send.assign(in, in + total * es);
        in = private_send.data();
      }
      const Region whole{in, nullptr, total};
      shm::reduce_scatter(*channel_, RegionList({&whole, 1}, es), out, recv_counts, dtype, op, srcs_, run_srcs_);
    });
  }

  void reduce_scatter_regions(std::span<const Region> regions, void* recv, std::span<const std::size_t> recv_counts,
                              DataType dtype, ReduceOp op) override {
    run("reduce_scatter", [&] {
      check_reduction(dtype, op);
      check_per_rank(recv_counts, "recv_counts");
      const RegionList list(regions, element_size(dtype));
      check_blocks_fill(list, recv_counts, "reduce_scatter");
      shm::reduce_scatter(*channel_, list, static_cast<std::byte*>(recv), recv_counts, dtype, op, srcs_, run_srcs_);
    });
  }

  void allgather_regions(const void* send, std::span<const Region> regions, std::span<const std::size_t> counts,
                         DataType dtype) override {
    run("allgatherv", [&] {
      check_per_rank(counts, "counts");
      const std::size_t es = element_size(dtype);
      check_blocks_fill(RegionList(regions, es), counts, "allgatherv");
      // gather moves bytes: the same regions and blocks counted in bytes.
      std::vector<Region> byte_regions(regions.begin(), regions.end());
      for (Region& r : byte_regions) r.count *= es;
      std::vector<std::size_t> bytes(counts.begin(), counts.end());
      for (std::size_t& b : bytes) b *= es;
      shm::allgather_into(*channel_, static_cast<const std::byte*>(send), RegionList(byte_regions, 1), bytes);
    });
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  Placement placement = {}) override {
    run("allgatherv", [&] {
      check_per_rank(recv_bytes, "recv_bytes");
      check_own_size(send_bytes, recv_bytes);
      auto* const out = static_cast<std::byte*>(recv);
      if (std::accumulate(recv_bytes.begin(), recv_bytes.end(), std::size_t{0}) >= channel_->mapped_bytes() &&
          shm::allgather_in_place(*channel_, exchange_, static_cast<const std::byte*>(send), out, recv_bytes,
                                  placement.recv)) {
        return;
      }
      if (shm::max_of(recv_bytes) > shm::kSingleCopyMinSlots * channel_->slot_bytes() &&
          shm::allgatherv_single_copy(*channel_, single_copy_, static_cast<const std::byte*>(send), out,
                                      recv_bytes)) {
        return;
      }
      shm::gather(*channel_, static_cast<const std::byte*>(send), out, recv_bytes, -1);
    });
  }

  // Fused batches and shareable buffers are reduced where they lie. The step
  // moves only the bytes a rank offers, so a room costs nothing until used, and
  // carrying an operation beats a second collective for it well past 4 KiB
  // (docs/benchmarks.md). 4 KiB keeps the step's block within a quarter of a
  // slot, and the step of every rank of a 16-rank job within 64 KiB.
  Capabilities capabilities() const override {
    const std::size_t slot = channel_->slot_bytes();
    return {.reduces_regions = true,
            .works_in_shared_buffers = true,
            .unpadded_block_bytes = slot,
            .eager_bytes_default =
                std::max<std::size_t>(Capabilities::kSmallEagerBytes, std::min<std::size_t>(4096, slot / 4 / 8 * 8))};
  }

  void allgather_self_sized(const void* send, void* recv, std::size_t max_block) override {
    if (max_block > channel_->slot_bytes()) return Communicator::allgather_self_sized(send, recv, max_block);
    run("allgather", [&] {
      shm::allgather_self_sized(*channel_, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv),
                                max_block);
    });
  }

  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    run("gatherv", [&] {
      check_per_rank(recv_bytes, "recv_bytes");
      check_own_size(send_bytes, recv_bytes);
      check_root(root);
      shm::gather(*channel_, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), recv_bytes, root);
    });
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    run("broadcast", [&] {
      check_root(root);
      auto* const data = static_cast<std::byte*>(buffer);
      if (bytes > shm::kSingleCopyMinSlots * channel_->slot_bytes() &&
          shm::broadcast_single_copy(*channel_, single_copy_, data, bytes, root)) {
        return;
      }
      shm::broadcast(*channel_, data, bytes, root);
    });
  }

  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    run("alltoallv", [&] {
      check_per_rank(send_bytes, "send_bytes");
      check_per_rank(recv_bytes, "recv_bytes");
      shm::alltoallv(*channel_, static_cast<const std::byte*>(send), send_bytes, static_cast<std::byte*>(recv),
                     recv_bytes);
    });
  }

  void barrier() override {
    run("barrier", [&] { shm::barrier(*channel_); });
  }

  void abort(const std::string& reason) override { channel_->abort(reason); }

 private:
  // Every collective: refuse when aborted or failed; a peer failure makes the
  // communicator unusable (the ranks are no longer in step).
  template <typename Body>
  void run(const char* operation, Body&& body) {
    channel_->throw_if_aborted();
    if (failure_) std::rethrow_exception(failure_);
    channel_->set_operation(operation);
    try {
      body();
    } catch (const PeerFailureError& e) {
      failure_ = std::current_exception();
      channel_->publish_failure(e.what());
      throw;
    } catch (const ShutdownError&) {
      throw;
    } catch (const std::exception& e) {
      // Anything else that interrupts a step leaves this rank out of step with
      // its peers; errors found before a step began (or after it ended) do not.
      if (channel_->mid_step()) {
        failure_ = std::make_exception_ptr(Error(std::string("the shm communicator is unusable: ") + operation +
                                                 " was interrupted by an error: " + e.what()));
      }
      throw;
    }
  }

  // ---- argument checks (local; the engine has validated across ranks) -----------
  // They run before the first step, so a rejected call leaves the ranks in step.

  static void check_reduction(DataType dtype, ReduceOp op) {
    if (!is_valid(dtype)) throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
    if (!is_valid(op) || op == ReduceOp::Average) {
      throw InvalidArgumentError(std::string("the shm communicator reduces with sum, min, max or product, not ") +
                                 to_string(op) + " (Average is Sum followed by a division)");
    }
  }

  void check_per_rank(std::span<const std::size_t> sizes, const char* what) const {
    if (sizes.size() != static_cast<std::size_t>(size())) {
      throw InvalidArgumentError(std::string(what) + " has " + std::to_string(sizes.size()) +
                                 " entries, expected one per rank (" + std::to_string(size()) + ")");
    }
  }
  void check_own_size(std::size_t send_bytes, std::span<const std::size_t> recv_bytes) const {
    if (send_bytes != recv_bytes[static_cast<std::size_t>(rank())]) {
      throw InvalidArgumentError("send_bytes (" + std::to_string(send_bytes) + ") differs from recv_bytes[" +
                                 std::to_string(rank()) + "] (" + std::to_string(recv_bytes[rank()]) + ")");
    }
  }
  void check_root(int root) const {
    if (root < 0 || root >= size()) {
      throw InvalidArgumentError("root rank " + std::to_string(root) + " is out of range for " +
                                 std::to_string(size()) + " ranks");
    }
  }

  std::unique_ptr<ShmChannel> channel_;
  std::vector<const void*> srcs_, run_srcs_;
  shm::BufferExchange exchange_;
  shm::SingleCopy single_copy_;
  std::exception_ptr failure_;
};

shm::SegmentConfig config_from_env(int size) {
  shm::SegmentConfig config;
  const auto slot = kSlotBytes.integer(), small = kSmallBytes.integer(), mapped = kMappedBytes.integer();
  // Every rank needs at least a few cache lines per peer in a slot (the
  // per-peer sub-slots of reduce_scatter and alltoallv) and room for the
  // alltoallv size table.
  const auto min_slot = static_cast<std::int64_t>(std::max<std::size_t>(4096, static_cast<std::size_t>(size) * 256));
  if (slot < min_slot) {
    throw InvalidArgumentError(std::string(kSlotBytes.name) + "=" + std::to_string(slot) + " is too small for " +
                               std::to_string(size) + " ranks (minimum " + std::to_string(min_slot) + ")");
  }
  config.mapped_bytes = mapped == 0 ? SIZE_MAX : static_cast<std::size_t>(mapped);
  config.first_step = static_cast<std::uint32_t>(kFirstStep.integer());
  config.slot_bytes = static_cast<std::size_t>(slot) / shm::kPageSize * shm::kPageSize;
  config.small_bytes = std::min(static_cast<std::size_t>(small), config.slot_bytes);
  config.single_copy = shm::single_copy_mode_from_env();
  return config;
}

}  // namespace

std::unique_ptr<Communicator> make_shm_communicator(int rank, int size, const std::string& job_id,
                                                    const CommunicatorOptions& options, const std::string& secret) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgumentError("invalid rank " + std::to_string(rank) + " of size " + std::to_string(size));
  }
  const std::string name = shm::segment_name(job_id, secret);
  shm::SegmentConfig config = rank == 0 ? config_from_env(size) : shm::SegmentConfig{};
  shm::JoinedSegment joined = shm::join_segment(name, rank, size, config, options.connect_timeout, secret);
  return std::make_unique<ShmCommunicator>(std::make_unique<ShmChannel>(std::move(joined), rank, options));
}

}  // namespace kolo::comm
