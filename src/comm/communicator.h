// The one interface every transport implements: collectives on contiguous
// buffers between the ranks of a job. The engine sees only this interface.
//
// Contract for every implementation:
//  - All ranks call the same sequence of operations with agreeing arguments; the
//    engine guarantees this through negotiation. A rank that breaks it is a bug.
//  - Calls are made by one thread at a time, not always the same one (whichever
//    runs the engine's cycle: docs/thread_model.md).
//  - Results of allreduce/reduce_scatter are bitwise identical on every rank.
//  - No call waits forever: a dead or stalled peer turns into PeerFailureError
//    (naming the rank) within the peer timeout, and abort() from any thread makes
//    every current and later call throw ShutdownError promptly.
//  - send == recv is allowed wherever both exist (in place).
//  - allreduce, allreduce_regions and allgatherv may carry where their buffers
//    lie in shareable memory (comm/placement.h): a hint for transports that can
//    work in place of the ranks' memory; the results are the same with or without.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/placement.h"
#include "comm/regions.h"
#include "comm/result_scale.h"
#include "common/settings.h"
#include "kolo/types.h"

namespace kolo::comm {

// A setting every rank must share for a communicator's collectives to match
// (its message sizes follow it): the variable and this rank's effective value.
struct SharedSetting {
  std::string name;
  std::int64_t value = 0;
};

struct CommunicatorOptions {
  // A peer that makes no progress for this long while we wait on it is declared
  // failed. A peer process that has exited is detected much sooner.
  std::chrono::milliseconds peer_timeout{30000};
  // How long setup waits for every peer to attach.
  std::chrono::milliseconds connect_timeout{30000};
  // The job rank of each of this communicator's ranks, for messages only;
  // empty when they are the job's. A communicator among some of the job's ranks
  // (a process set's, the hierarchical communicator's part inside a host) numbers
  // them from 0 but names them as the job does, so that every rank's error names
  // the same process; PeerFailureError::peer_rank() stays this communicator's own
  // number.
  std::vector<int> job_ranks;
  // The scheduler time slice a rank asks for while it sleeps waiting for a peer
  // (common/wake_slice.h): woken, it runs before the busy processes beside it
  // instead of after their slices. 0 leaves the kernel's slice (KOLO_WAKE_SLICE_US).
  std::chrono::microseconds wake_slice{100};
};

// The two timeouts above, which bootstrap (KOLO_START_TIMEOUT also for the
// rendezvous) and kolo-server read as well.
extern const settings::Setting kPeerTimeout, kStartTimeout;

// What a transport can do beyond what every one does. Fixed for the
// communicator's life.
struct Capabilities {
  // allreduce_regions reduces the regions where they lie instead of staging
  // them through one buffer: the engine hands it fused batches as they are.
  bool reduces_regions = false;
  // An allreduce of shareable Buffers (Placement) works in place of the peers'
  // memory instead of copying through the transport: where gradients in
  // shareable buckets pay off (shared memory on one host).
  bool works_in_shared_buffers = false;
  // The largest `max_block` for which allgather_self_sized moves only the bytes
  // used (0: it always pads).
  std::size_t unpadded_block_bytes = 0;
  // The largest operation input the engine's negotiation step carries by default
  // (engine/agreement.h; KOLO_EAGER_BYTES overrides it): what the step moves
  // about as cheaply as the operation's own collective would. Where every block
  // is padded to the largest, a room for more would cost every cycle, so a little.
  std::size_t eager_bytes_default = kSmallEagerBytes;
  static constexpr std::size_t kSmallEagerBytes = 64;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "shm", "self", ... for logs and benchmarks.
  virtual std::string name() const = 0;

  // recv[i] = send_0[i] op send_1[i] op ... for `count` elements, then `scale`
  // applied (the engine's Average and postscale; none by default). `op` is never
  // Average (the engine divides). Reduction order is by rank, the same on every
  // rank. A transport that reduces in blocks scales each block as it reduces it,
  // while it is in cache; the same bits as a pass over the result after.
  // Every implementation declares the same defaults (no scale, no placement).
  virtual void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                         const ResultScale& scale = {}, Placement placement = {}) = 0;

  // One allreduce over several buffers, as if their sends were concatenated and
  // the result split back into their recvs, without that copy, `scale` applied
  // as by allreduce. No recv may overlap another region's send, and every
  // rank passes regions of the same counts (the engine's fused batch). This
  // default stages them (allreduce_staged; Capabilities::reduces_regions false).
  virtual void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op,
                                 const ResultScale& scale);

  // `send` holds sum(recv_counts) elements on every rank; rank r receives the
  // reduction of block r (recv_counts[r] elements, blocks in rank order).
  virtual void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts,
                              DataType dtype, ReduceOp op) = 0;
  // reduce_scatter whose input is the send sides of `regions` as one index space
  // (their recv sides are not used); none may overlap `recv`. And allgatherv of
  // elements into the recv sides of `regions` as one index space, rank r's
  // counts[r] elements at their offset (this rank's from `send`, which may not
  // overlap them). A composition's steps over a fused batch (the hierarchical
  // allreduce); these defaults stage through one buffer.
  virtual void reduce_scatter_regions(std::span<const Region> regions, void* recv,
                                      std::span<const std::size_t> recv_counts, DataType dtype, ReduceOp op);
  virtual void allgather_regions(const void* send, std::span<const Region> regions,
                                 std::span<const std::size_t> counts, DataType dtype);

  // Byte-level: rank r contributes recv_bytes[r] bytes (send_bytes == recv_bytes[rank]);
  // `recv` receives all contributions concatenated in rank order.
  virtual void allgatherv(const void* send, std::size_t send_bytes, void* recv,
                          std::span<const std::size_t> recv_bytes, Placement placement = {}) = 0;

  // An allgather of blocks whose lengths only their senders know. Every block
  // begins with its own length in bytes, a uint32 (see self_sized_length), at
  // least 4 and at most `max_block`; `send` holds `max_block` bytes (past the
  // length: padding). Rank r's block lands at recv + r * max_block; the bytes
  // after it there are unspecified. A block of a bad length is an
  // InvalidArgumentError. The default sends every block padded to `max_block`;
  // up to Capabilities::unpadded_block_bytes only each block's own length moves,
  // so a caller may reserve room for large blocks and pay for them only when used.
  virtual void allgather_self_sized(const void* send, void* recv, std::size_t max_block);
  // What this transport does beyond the contract (the defaults: nothing more).
  virtual Capabilities capabilities() const { return {}; }
  // The settings this communicator needs the same on every rank; the engine
  // checks them with its own when it starts (engine/settings_agreement.h), so a
  // job set up differently fails at init() with one message on every rank.
  virtual std::vector<SharedSetting> shared_settings() const { return {}; }

  // As allgatherv, but only `root` receives (recv may be null elsewhere).
  virtual void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                       int root) = 0;

  // Overwrites `bytes` bytes of `buffer` on every rank with root's.
  virtual void broadcast(void* buffer, std::size_t bytes, int root) = 0;

  // send_bytes[j]: bytes this rank sends to rank j (consecutive in `send`, in rank
  // order); recv_bytes[j]: bytes this rank receives from rank j (same layout in recv).
  virtual void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                         std::span<const std::size_t> recv_bytes) = 0;

  virtual void barrier() = 0;

  // The communicator among the ranks themselves, for the engine's agreement
  // step (a small MIN allreduce every cycle): this one, except where allreduce()
  // reduces elsewhere (parameter servers, comm/ps). Where it is another, the
  // engine also finishes no allreduce from inputs the ranks gathered among
  // themselves: every allreduce goes through allreduce().
  virtual Communicator& among_ranks() { return *this; }
  bool reduces_among_ranks() { return &among_ranks() == this; }

  // Callable from any thread: wakes every waiter; current and later calls throw
  // ShutdownError carrying `reason`. Never blocks.
  virtual void abort(const std::string& reason) = 0;

 private:
  // allgather_self_sized's block sizes, kept across calls (the negotiation step
  // runs it every cycle). A member, not a thread_local: cycles run on whichever
  // thread holds the engine's cycle (docs/thread_model.md), and a forked child
  // must still reach the memory through the communicator.
  std::vector<std::size_t> self_sized_blocks_;
};

// The length a self-sized block from rank `sender` declares (allgather_self_sized);
// an InvalidArgumentError when it is below 4 or above `max_block`.
std::uint32_t self_sized_length(const void* block, std::size_t max_block, int sender);

// The communicator of a job of one process: every collective is a local copy.
std::unique_ptr<Communicator> make_self_communicator();

// What a staged allreduce does between its passes: `prepare` on the staged
// elements before the reduction (a prescale), `staged` once they are staged,
// `reduced` once the reduction is done (the engine's timeline marks the copies).
struct StagingSteps {
  std::function<void(std::byte* data, std::size_t count)> prepare;
  std::function<void()> staged, reduced;
};

// The one place a fused batch is staged: the regions' sends gathered into
// `staging` (grown as needed; the caller keeps it, so that its memory is
// reused), one allreduce in place through `comm`, and the result scattered
// into the recvs. Serves transports without a regions path, and batches that
// cannot be reduced where they lie (prescaled, a joined rank's zeros, buffers
// that overlap). Regions may lack a send or a recv (regions.h).
void allreduce_staged(Communicator& comm, std::span<const Region> regions, DataType dtype, ReduceOp op,
                      const ResultScale& scale, std::vector<std::byte>& staging, const StagingSteps& steps = {});

}  // namespace kolo::comm
