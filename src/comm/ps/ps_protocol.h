// What workers and parameter servers say to each other, on kolo's TCP frames
// (comm/tcp/tcp_mesh.h: every frame carries a magic word, its sequence number
// on the connection and its length, and the connection is authenticated).
//
// An allreduce of a worker is cut into partitions (PartitionPlan); partition p
// of the worker's allreduce number c goes to server owner(c, p). To that server
// the worker sends
//   a push header (kPushHeaderBytes, one frame): kind Push, dtype, op, c, p,
//     count, and the scale the result takes (an Average's division, a postscale)
//   the partition's data (one frame of count elements)
// and the server answers, once every worker's push of (c, p) is in, with their
// reduction in worker-rank order, scaled (one frame of count elements): the
// pull's answer. The server scales the partition it has just reduced, while it
// is in cache, so that no worker makes a pass over the whole result. Every
// worker makes the same allreduces in the same order (the engine's negotiation
// guarantees it), so a server receives the same sequence of pushes from every
// worker and serves them in that order. At an orderly end each worker sends one
// header of kind Bye to every server.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/result_scale.h"
#include "kolo/types.h"

namespace kolo::comm::ps {

constexpr std::size_t kPushHeaderBytes = 48;
// The most one push may carry: a bound checked before a server allocates.
constexpr std::size_t kMaxPushBytes = std::size_t{1} << 30;

enum class Kind : std::uint8_t { Push = 1, Bye = 2 };

struct PushHeader {
  Kind kind = Kind::Push;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::uint64_t call = 0;       // the worker's allreduce number, from 0
  std::uint32_t partition = 0;  // within the call
  std::uint64_t count = 0;      // elements
  ResultScale scale{};          // applied to the reduction before it is answered

  std::size_t bytes() const { return static_cast<std::size_t>(count) * element_size(dtype); }
  bool operator==(const PushHeader&) const = default;
  // "push of allreduce 12, partition 3: 1000 float32 (sum)", or "bye".
  std::string describe() const;
};

using EncodedHeader = std::array<std::uint8_t, kPushHeaderBytes>;

EncodedHeader encode(const PushHeader& header);
// Throws InvalidArgumentError saying what is wrong: no header (magic), an
// unknown kind, dtype or op, Average (a Sum with a scale instead), more than
// kMaxPushBytes, or a scale that is not a finite factor or a divisor from 1 up
// (not both).
PushHeader decode(const EncodedHeader& bytes);

// How a worker cuts its allreduces and which server owns each piece.
struct PartitionPlan {
  int servers = 1;
  // A partition holds at most this many bytes (whole elements; at least one).
  std::size_t partition_bytes = 4 << 20;

  std::size_t elements_per_partition(DataType dtype) const;
  // Partition p of call c: the server picked by a hash of c, then the next ones
  // in turn, so that a call's partitions spread over all servers evenly and
  // calls of one partition spread by the hash.
  int owner(std::uint64_t call, std::uint32_t partition) const;
};

}  // namespace kolo::comm::ps
