// kolo's collective algorithms over any transport's point-to-point transfers
// (see direct_collectives.cc): gloo's and kolo's own TCP share them, so both give
// the same bits as the shared-memory communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include <string>

#include "comm/direct/point_to_point.h"
#include "comm/regions.h"
#include "comm/result_scale.h"
#include "kolo/types.h"

namespace kolo::comm::direct {

struct Tuning {
  // Allreduce up to this many bytes: one exchange of whole inputs, every rank
  // reduces (fewest round trips). Above: reduce-scatter + allgather.
  std::size_t small_bytes = 64 * 1024;
  // Reduce-scatter moves blocks in rounds of at most this many bytes per peer,
  // double-buffered, which bounds the scratch memory to 2 x (size-1) rounds.
  // 0: kAutoRoundBytes / (size-1), at least kMinAutoRoundBytes (round_bytes_for).
  std::size_t round_bytes = 1 << 20;

  // A round of all peers' pieces together. Rounds this small keep the scratch
  // pieces, and the socket buffers they pass through, in a core's L2 cache, so
  // the kernel's copies and the reduction run from cache: on TCP loopback and
  // between network namespaces they move 1.3 to 2x the bytes per second that
  // 1 MiB rounds do (docs/benchmarks.md). Transports with a cost per message
  // (gloo's: a ready notification and a thread wake-up) want larger rounds.
  static constexpr std::size_t kAutoRoundBytes = 128 << 10;
  static constexpr std::size_t kMinAutoRoundBytes = 16 << 10;
  // The most a setting may give: the scratch holds 2 x (size-1) rounds.
  static constexpr std::int64_t kMaxRoundBytes = 64 << 20;
  // The round per peer among `size` ranks.
  std::size_t round_bytes_for(int size) const;

  // <prefix>_SMALL_BYTES and <prefix>_ROUND_BYTES (e.g. KOLO_GLOO_SMALL_BYTES)
  // over `defaults` (a default-made Tuning when not given).
  static Tuning from_env(const std::string& prefix, Tuning defaults);
  static Tuning from_env(const std::string& prefix) { return from_env(prefix, Tuning{}); }
};

class Collectives {
 public:
  Collectives(Links& mesh, Tuning tuning) : mesh_(mesh), tuning_(tuning) {}
  const Tuning& tuning() const { return tuning_; }

  // Communicator::allreduce with a ResultScale: each owner scales its block as it reduces
  // it, before the block goes to the others.
  void allreduce(const void* send, void* recv, std::size_t count, DataType dtype, ReduceOp op,
                 const ResultScale& scale);
  // Communicator::allreduce_regions without staging: each piece moves as one
  // message per region it spans, so every rank must pass regions of the same
  // counts (the engine's fused batch).
  void allreduce_regions(std::span<const Region> regions, DataType dtype, ReduceOp op, const ResultScale& scale);
  void reduce_scatter(const void* send, void* recv, std::span<const std::size_t> recv_counts, DataType dtype,
                      ReduceOp op);
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes);
  void gatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
               int root);
  void broadcast(void* buffer, std::size_t bytes, int root);
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, void* recv,
                 std::span<const std::size_t> recv_bytes);
  void barrier();

 private:
  void allreduce_small(const std::byte* send, std::byte* recv, std::size_t count, DataType dtype, ReduceOp op,
                       const ResultScale& scale);
  // Reduce-scatter + allgather over the elements of `space`.
  void allreduce_large(const RegionList& space, DataType dtype, ReduceOp op, const ResultScale& scale);
  // Rank j's block of `counts` (elements of `space`, offsets in `offsets`) is
  // reduced over all ranks into the recv side of this rank's block, in rounds
  // (see round_piece), and scaled; `after_round(round)`, when given, runs once
  // each round's piece is reduced.
  void reduce_blocks(const RegionList& space, std::span<const std::size_t> counts,
                     std::span<const std::size_t> offsets, DataType dtype, ReduceOp op, const ResultScale& scale,
                     const char* what, const std::function<void(std::size_t round)>& after_round = {});
  // reduce_many and the scale in pieces that stay in cache, with the
  // transport's progress() between them.
  void reduce_progressing(std::byte* out, std::vector<const void*>& srcs, std::size_t count, DataType dtype,
                          ReduceOp op, const ResultScale& scale);
  std::byte* scratch(std::size_t bytes);
  std::size_t elements_per_round(std::size_t element_size) const;

  Links& mesh_;
  Tuning tuning_;
  std::vector<std::byte> scratch_;
};

}  // namespace kolo::comm::direct
