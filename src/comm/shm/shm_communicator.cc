// The shared-memory communicator.
//
// SEGMENT. One POSIX shared-memory object per job, "/kolo-<job_id>-shm"
// (shm_segment.cc). Rank 0 creates it (O_CREAT|O_EXCL: an existing one is a
// stale leftover and an error), reserves and maps it, writes the header and
// publishes a ready magic word; the other ranks retry shm_open/mmap until they
// see the magic or the connect timeout passes. Every rank writes its pid into its
// control block and increments an attach counter; the rank that completes the
// count unlinks the name, so nothing is left in /dev/shm even if ranks crash
// later. Layout (shm_layout.h): a header page, one control block per rank (three
// progress counters, each on its own cache line, plus pid, state and an abort
// reason), then per rank two data slots of `slot_bytes` each.
//
// STEPS. Every collective is a sequence of steps, numbered by a counter that all
// ranks advance identically (the engine guarantees that all ranks call the same
// collectives with agreeing arguments, so all ranks derive the same number of
// steps from the arguments). Step s uses slot s % 2 of every rank. Per rank three
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
// ALLREDUCE, large (> small_bytes). The buffer is cut into chunks of one slot;
// each chunk into `size` segments (cache-line aligned), segment j owned by rank j.
// Per chunk (one step), on rank r:
//   1. copy its input for every other owner's segment into its slot; post;
//   2. as owner of segment r: wait for every peer's posted, reduce segment r over
//      all ranks IN RANK ORDER with reduce_many (its own contribution read from
//      its private input, no copy) into segment r of its own slot; post reduced;
//      copy that result to its output;
//   3. for every other owner j: wait for j's reduced, copy segment j from j's
//      slot to the output; finish (consumed).
// Every element is reduced once, by its owner, in rank order, so all ranks get
// the same bits. Each rank moves ~3x its share of the data and reduces 1/size
// of it, all ranks in parallel, and phases of consecutive chunks overlap.
// ALLREDUCE, small: one step: every rank copies its whole input into its slot,
// posts, waits for every peer and reduces all inputs in rank order itself (same
// kernel, same order, same bits on every rank). One synchronization instead of
// two, which is what matters for latency.
// REDUCE_SCATTER: step 1 and 2 of allreduce with per-owner sub-slots of
// slot_bytes/size; the owner writes straight to its output.
// ALLGATHERV / GATHERV / BROADCAST: per step each contributing rank copies up to
// one slot of its data in and posts; readers wait and copy out.
// ALLTOALLV: a first step exchanges every rank's send and receive sizes (so that
// all ranks agree on the number of steps and a size mismatch fails on every rank
// alike); then per step rank i copies its next piece for rank j into sub-slot j
// of its slot, and rank j copies it out of sub-slot j of rank i's slot.
// BARRIER: post, wait for every peer's posted.
// In place: the buffers may be the same (or, for allgatherv / reduce_scatter,
// this rank's block of the other); other overlaps take a private copy first.
//
// WAITING (shm_channel.cc). A waiter spins on the counter for up to ~50 us (10
// us and yielding the CPU when there are more ranks than cores), then sleeps in
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
// every later call throws the same error.
#include "comm/shm/shm_communicator.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>
#include <vector>

#include "comm/shm/shm_channel.h"
#include "comm/shm/shm_segment.h"
#include "comm/shm/stream_copy.h"
#include "common/env.h"
#include "common/reduce.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using shm::ShmChannel;

constexpr std::size_t kDefaultSlotBytes = std::size_t{1} << 20;
constexpr std::size_t kDefaultSmallBytes = std::size_t{64} << 10;

std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// [begin, end) of piece `index` when `len` elements are split into `parts`
// consecutive pieces whose boundaries are multiples of `align` (the last pieces
// may be shorter or empty).
struct Piece {
  std::size_t begin = 0;
  std::size_t end = 0;
  std::size_t size() const { return end - begin; }
};

Piece piece_of(std::size_t len, int parts, int index, std::size_t align) {
  std::size_t per = ceil_div(ceil_div(len, static_cast<std::size_t>(parts)), align) * align;
  Piece p;
  p.begin = std::min(len, per * static_cast<std::size_t>(index));
  p.end = std::min(len, p.begin + per);
  return p;
}

bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

std::vector<std::size_t> prefix_offsets(std::span<const std::size_t> sizes) {
  std::vector<std::size_t> offsets(sizes.size() + 1, 0);
  for (std::size_t i = 0; i < sizes.size(); ++i) offsets[i + 1] = offsets[i] + sizes[i];
  return offsets;
}

std::size_t max_of(std::span<const std::size_t> sizes) {
  std::size_t m = 0;
  for (auto s : sizes) m = std::max(m, s);
  return m;
}

void copy_plain(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

class ShmCommunicator final : public Communicator {
 public:
  explicit ShmCommunicator(std::unique_ptr<ShmChannel> channel)
      : channel_(std::move(channel)), srcs_(static_cast<std::size_t>(channel_->size())) {}

  int rank() const override { return channel_->rank(); }
  int size() const override { return channel_->size(); }
  std::string name() const override { return "shm"; }

  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) override {
    run("allreduce", [&] {
      check_reduction(dtype, op);
      const std::size_t bytes = count * element_size(dtype);
      if (bytes == 0) return;
      if (bytes <= channel_->small_bytes()) {
        allreduce_small(static_cast<const std::byte*>(send), recv, count, dtype, op);
      } else {
        allreduce_large(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), count, dtype, op);
      }
    });
  }

  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op) override {
    run("reduce_scatter", [&] {
      check_reduction(dtype, op);
      check_per_rank(recv_counts, "recv_counts");
      do_reduce_scatter(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), recv_counts, dtype, op);
    });
  }

  void allgatherv(const void* send, std::size_t send_bytes, void* recv,
                  std::span<const std::size_t> recv_bytes) override {
    run("allgatherv", [&] {
      check_per_rank(recv_bytes, "recv_bytes");
      check_own_size(send_bytes, recv_bytes);
      gather(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), recv_bytes, -1);
    });
  }

  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root) override {
    run("gatherv", [&] {
      check_per_rank(recv_bytes, "recv_bytes");
      check_own_size(send_bytes, recv_bytes);
      check_root(root);
      gather(static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), recv_bytes, root);
    });
  }

  void broadcast(void* buffer, std::size_t bytes, int root) override {
    run("broadcast", [&] {
      check_root(root);
      do_broadcast(static_cast<std::byte*>(buffer), bytes, root);
    });
  }

  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes) override {
    run("alltoallv", [&] {
      check_per_rank(send_bytes, "send_bytes");
      check_per_rank(recv_bytes, "recv_bytes");
      do_alltoallv(static_cast<const std::byte*>(send), send_bytes, static_cast<std::byte*>(recv), recv_bytes);
    });
  }

  void barrier() override {
    run("barrier", [&] {
      channel_->post();
      for (int d = 1; d < size(); ++d) channel_->wait_posted((rank() + d) % size());
      channel_->finish_step();
    });
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
    } catch (const PeerFailureError&) {
      failure_ = std::current_exception();
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

  static void check_reduction(DataType dtype, ReduceOp op) {
    if (!is_valid(dtype)) throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
    if (!is_valid(op) || op == ReduceOp::Average) {
      throw InvalidArgumentError(std::string("the shm communicator reduces with sum, min, max or product, not ") +
                                 to_string(op) + " (Average is Sum followed by a division)");
    }
  }

  // ---- argument checks (local; the engine has validated across ranks) -----------

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

  // ---- allreduce -------------------------------------------------------------------------

  void allreduce_small(const std::byte* send, void* recv, std::size_t count, DataType dtype, ReduceOp op) {
    const int me = rank();
    channel_->acquire_slot();
    std::memcpy(channel_->slot(me), send, count * element_size(dtype));
    channel_->post();
    for (int j = 0; j < size(); ++j) {
      if (j == me) {
        srcs_[j] = send;
      } else {
        channel_->wait_posted(j);
        srcs_[j] = channel_->slot(j);
      }
    }
    reduce_many(recv, srcs_.data(), size(), count, dtype, op);
    channel_->finish_step();
  }

  void allreduce_large(const std::byte* send, std::byte* recv, std::size_t count, DataType dtype, ReduceOp op) {
    const int n = size(), me = rank();
    const std::size_t es = element_size(dtype);
    const std::size_t chunk = channel_->slot_bytes() / es;
    const std::size_t align = std::max<std::size_t>(1, shm::kCacheLine / es);
    auto copy_out = count * es >= shm::kStreamingOutputBytes ? shm::copy_streaming : copy_plain;
    for (std::size_t base = 0; base < count; base += chunk) {
      const std::size_t len = std::min(chunk, count - base);
      std::byte* mine = channel_->slot(me);

      channel_->acquire_slot();
      for (int d = 1; d < n; ++d) {
        Piece p = piece_of(len, n, (me + d) % n, align);
        std::memcpy(mine + p.begin * es, send + (base + p.begin) * es, p.size() * es);
      }
      channel_->post();

      const Piece own = piece_of(len, n, me, align);
      if (own.size() > 0) {
        for (int j = 0; j < n; ++j) {
          if (j == me) {
            srcs_[j] = send + (base + own.begin) * es;
          } else {
            channel_->wait_posted(j);
            srcs_[j] = channel_->slot(j) + own.begin * es;
          }
        }
        reduce_many(mine + own.begin * es, srcs_.data(), n, own.size(), dtype, op);
      }
      channel_->post_reduced();
      copy_out(recv + (base + own.begin) * es, mine + own.begin * es, own.size() * es);

      for (int d = 1; d < n; ++d) {
        const int j = (me + d) % n;
        Piece p = piece_of(len, n, j, align);
        if (p.size() == 0) continue;
        channel_->wait_reduced(j);
        copy_out(recv + (base + p.begin) * es, channel_->slot(j) + p.begin * es, p.size() * es);
      }
      channel_->finish_step();
    }
  }

  // ---- reduce_scatter -----------------------------------------------------------------

  void do_reduce_scatter(const std::byte* send, std::byte* recv, std::span<const std::size_t> counts,
                         DataType dtype, ReduceOp op) {
    const int n = size(), me = rank();
    const std::size_t es = element_size(dtype);
    const std::vector<std::size_t> offsets = prefix_offsets(counts);
    const std::size_t total_bytes = offsets[n] * es;
    // The output may be this rank's own block of the input (each element is then
    // read just before it is overwritten); any other overlap needs a copy.
    std::vector<std::byte> private_send;
    if (overlaps(send, total_bytes, recv, counts[me] * es) && recv != send + offsets[me] * es) {
      private_send.assign(send, send + total_bytes);
      send = private_send.data();
    }
    const std::size_t align = std::max<std::size_t>(1, shm::kCacheLine / es);
    const std::size_t per_owner = channel_->slot_bytes() / static_cast<std::size_t>(n) / es / align * align;
    const std::size_t steps = ceil_div(max_of(counts), per_owner);
    for (std::size_t s = 0; s < steps; ++s) {
      const std::size_t begin = s * per_owner;
      auto piece_len = [&](int j) { return begin < counts[j] ? std::min(per_owner, counts[j] - begin) : 0; };
      std::byte* mine = channel_->slot(me);

      channel_->acquire_slot();
      for (int d = 1; d < n; ++d) {
        const int j = (me + d) % n;
        std::memcpy(mine + j * per_owner * es, send + (offsets[j] + begin) * es, piece_len(j) * es);
      }
      channel_->post();

      if (const std::size_t len = piece_len(me); len > 0) {
        for (int j = 0; j < n; ++j) {
          if (j == me) {
            srcs_[j] = send + (offsets[me] + begin) * es;
          } else {
            channel_->wait_posted(j);
            srcs_[j] = channel_->slot(j) + me * per_owner * es;
          }
        }
        reduce_many(recv + begin * es, srcs_.data(), n, len, dtype, op);
      }
      channel_->finish_step();
    }
  }

  // ---- allgatherv (root < 0) and gatherv ---------------------------------------------

  void gather(const std::byte* send, std::byte* recv, std::span<const std::size_t> sizes, int root) {
    const int n = size(), me = rank();
    const std::vector<std::size_t> offsets = prefix_offsets(sizes);
    const bool receives = root < 0 || root == me;
    std::vector<std::byte> private_send;
    if (receives) {
      // In place means this rank's block of the output already holds its data.
      if (overlaps(send, sizes[me], recv, offsets[n]) && send != recv + offsets[me]) {
        private_send.assign(send, send + sizes[me]);
        send = private_send.data();
      }
      copy_bytes(recv + offsets[me], send, sizes[me]);
    }
    const std::size_t slot = channel_->slot_bytes();
    const std::size_t steps = ceil_div(max_of(sizes), slot);
    for (std::size_t s = 0; s < steps; ++s) {
      const std::size_t begin = s * slot;
      auto piece_len = [&](int j) { return begin < sizes[j] ? std::min(slot, sizes[j] - begin) : 0; };
      if (me != root && piece_len(me) > 0) {
        channel_->acquire_slot();
        std::memcpy(channel_->slot(me), send + begin, piece_len(me));
        channel_->post();
      }
      if (receives) {
        for (int d = 1; d < n; ++d) {
          const int j = (me + d) % n;
          if (piece_len(j) == 0) continue;
          channel_->wait_posted(j);
          std::memcpy(recv + offsets[j] + begin, channel_->slot(j), piece_len(j));
        }
      }
      channel_->finish_step();
    }
  }

  // ---- broadcast -------------------------------------------------------------------------

  void do_broadcast(std::byte* buffer, std::size_t bytes, int root) {
    const std::size_t slot = channel_->slot_bytes();
    const std::size_t steps = ceil_div(bytes, slot);
    for (std::size_t s = 0; s < steps; ++s) {
      const std::size_t begin = s * slot, len = std::min(slot, bytes - begin);
      if (rank() == root) {
        channel_->acquire_slot();
        std::memcpy(channel_->slot(root), buffer + begin, len);
        channel_->post();
      } else {
        channel_->wait_posted(root);
        std::memcpy(buffer + begin, channel_->slot(root), len);
      }
      channel_->finish_step();
    }
  }

  // ---- alltoallv -------------------------------------------------------------------------

  // Step one: every rank learns every rank's send and receive sizes. Returns the
  // n x n matrix of bytes sent (row = sender), after checking that every
  // receiver expects exactly what is sent to it; a mismatch throws on every rank.
  std::vector<std::size_t> exchange_alltoall_sizes(std::span<const std::size_t> send_bytes,
                                                   std::span<const std::size_t> recv_bytes) {
    const int n = size(), me = rank();
    const std::size_t row = static_cast<std::size_t>(n) * sizeof(std::uint64_t);
    channel_->acquire_slot();
    std::byte* mine = channel_->slot(me);
    for (int j = 0; j < n; ++j) {
      std::uint64_t sent = send_bytes[j], expected = recv_bytes[j];
      std::memcpy(mine + j * sizeof sent, &sent, sizeof sent);
      std::memcpy(mine + row + j * sizeof expected, &expected, sizeof expected);
    }
    channel_->post();
    std::vector<std::size_t> sent(static_cast<std::size_t>(n) * n), expected(sent.size());
    for (int i = 0; i < n; ++i) {
      if (i != me) channel_->wait_posted(i);
      const std::byte* theirs = channel_->slot(i);
      for (int j = 0; j < n; ++j) {
        std::uint64_t a, b;
        std::memcpy(&a, theirs + j * sizeof a, sizeof a);
        std::memcpy(&b, theirs + row + j * sizeof b, sizeof b);
        sent[i * n + j] = a;
        expected[i * n + j] = b;
      }
    }
    channel_->finish_step();
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (sent[i * n + j] != expected[j * n + i]) {
          throw InvalidArgumentError("alltoallv: rank " + std::to_string(i) + " sends " +
                                     std::to_string(sent[i * n + j]) + " bytes to rank " + std::to_string(j) +
                                     ", which expects " + std::to_string(expected[j * n + i]));
        }
      }
    }
    return sent;
  }

  void do_alltoallv(const std::byte* send, std::span<const std::size_t> send_bytes, std::byte* recv,
                    std::span<const std::size_t> recv_bytes) {
    const int n = size(), me = rank();
    const std::vector<std::size_t> sent = exchange_alltoall_sizes(send_bytes, recv_bytes);
    const std::vector<std::size_t> send_offsets = prefix_offsets(send_bytes);
    const std::vector<std::size_t> recv_offsets = prefix_offsets(recv_bytes);
    std::vector<std::byte> private_send;
    if (overlaps(send, send_offsets[n], recv, recv_offsets[n])) {
      private_send.assign(send, send + send_offsets[n]);
      send = private_send.data();
    }
    copy_bytes(recv + recv_offsets[me], send + send_offsets[me], send_bytes[me]);

    const std::size_t per_peer = channel_->slot_bytes() / static_cast<std::size_t>(n) / shm::kCacheLine * shm::kCacheLine;
    std::size_t largest = 0;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i != j) largest = std::max(largest, sent[i * n + j]);
      }
    }
    const std::size_t steps = ceil_div(largest, per_peer);
    for (std::size_t s = 0; s < steps; ++s) {
      const std::size_t begin = s * per_peer;
      auto piece_len = [&](int from, int to) {
        std::size_t total = sent[from * n + to];
        return begin < total ? std::min(per_peer, total - begin) : 0;
      };
      bool writes = false;
      for (int j = 0; j < n; ++j) writes |= j != me && piece_len(me, j) > 0;
      if (writes) {
        channel_->acquire_slot();
        std::byte* mine = channel_->slot(me);
        for (int d = 1; d < n; ++d) {
          const int j = (me + d) % n;
          std::memcpy(mine + j * per_peer, send + send_offsets[j] + begin, piece_len(me, j));
        }
        channel_->post();
      }
      for (int d = 1; d < n; ++d) {
        const int i = (me + n - d) % n;
        const std::size_t len = piece_len(i, me);
        if (len == 0) continue;
        channel_->wait_posted(i);
        std::memcpy(recv + recv_offsets[i] + begin, channel_->slot(i) + me * per_peer, len);
      }
      channel_->finish_step();
    }
  }

  std::unique_ptr<ShmChannel> channel_;
  std::vector<const void*> srcs_;
  std::exception_ptr failure_;
};

shm::SegmentConfig config_from_env(int size) {
  shm::SegmentConfig config;
  auto slot = env::get_int("KOLO_SHM_SLOT_BYTES", static_cast<std::int64_t>(kDefaultSlotBytes));
  auto small = env::get_int("KOLO_SHM_SMALL_BYTES", static_cast<std::int64_t>(kDefaultSmallBytes));
  // Every rank needs at least a few cache lines per peer in a slot (the
  // per-peer sub-slots of reduce_scatter and alltoallv) and room for the
  // alltoallv size table.
  const auto min_slot = static_cast<std::int64_t>(std::max<std::size_t>(4096, static_cast<std::size_t>(size) * 256));
  if (slot < min_slot) {
    throw InvalidArgumentError("KOLO_SHM_SLOT_BYTES=" + std::to_string(slot) + " is too small for " +
                               std::to_string(size) + " ranks (minimum " + std::to_string(min_slot) + ")");
  }
  if (small < 0) throw InvalidArgumentError("KOLO_SHM_SMALL_BYTES must not be negative");
  // Tests only: start the step counters close to 2^32 to exercise wraparound.
  config.first_step = static_cast<std::uint32_t>(env::get_int("KOLO_SHM_FIRST_STEP", 0));
  config.slot_bytes = static_cast<std::size_t>(slot) / shm::kPageSize * shm::kPageSize;
  config.small_bytes = std::min(static_cast<std::size_t>(small), config.slot_bytes);
  return config;
}

}  // namespace

std::unique_ptr<Communicator> make_shm_communicator(int rank, int size, const std::string& job_id,
                                                    const CommunicatorOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgumentError("invalid rank " + std::to_string(rank) + " of size " + std::to_string(size));
  }
  const std::string name = shm::segment_name(job_id);
  shm::SegmentConfig config = rank == 0 ? config_from_env(size) : shm::SegmentConfig{};
  shm::JoinedSegment joined = shm::join_segment(name, rank, size, config, options.connect_timeout);
  return std::make_unique<ShmCommunicator>(std::make_unique<ShmChannel>(std::move(joined), rank, options));
}

}  // namespace kolo::comm
