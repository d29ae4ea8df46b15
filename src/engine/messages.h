// What ranks tell the coordinator (Request) and what it answers (Response), and
// their wire encoding. See docs/engine.md, "Negotiation".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kolo/types.h"

namespace kolo::engine {

// Wire-stable values.
enum class OpType : std::uint8_t {
  Allreduce = 0,
  Allgather = 1,
  Broadcast = 2,
  Alltoall = 3,
  Reducescatter = 4,
  Barrier = 5,
  Join = 6,
};
const char* to_string(OpType op);
using kolo::to_string;  // keep the DataType/Shape overloads visible here

// A broadcast root the caller named by job rank r that is not a member of the
// operation's set travels as kRootOutsideSet + r, so that the coordinator
// refuses it on every rank and names r.
inline constexpr std::int32_t kRootOutsideSet = 1 << 30;

// One rank's description of one named operation. Two requests for the same name
// must agree across ranks (except alltoall splits and the allgather first
// dimension, which are per rank).
struct Request {
  std::string name;
  OpType op = OpType::Allreduce;
  DataType dtype = DataType::Float32;
  ReduceOp reduce_op = ReduceOp::Sum;
  Shape shape;
  double prescale = 1.0;
  double postscale = 1.0;
  std::int32_t root = 0;              // broadcast: a member index of the engine's set
  std::vector<std::int64_t> splits;  // alltoall; empty = even split
  std::string group;                 // grouped allreduce; empty = none
  std::int32_t group_size = 0;
  // Submitted while another thread of this rank had an operation of the same
  // unnamed call site in flight (engine/call_site.h): refused on every rank.
  bool racing_site = false;

  bool operator==(const Request&) const = default;
};

enum class ErrorKind : std::uint8_t { None = 0, InvalidArgument = 1, Mismatch = 2 };

// The coordinator's decision for one operation (or one group), identical on
// every rank. The executor may fuse several allreduce responses into one batch.
struct Response {
  OpType op = OpType::Allreduce;
  std::vector<std::string> names;
  ErrorKind error_kind = ErrorKind::None;
  std::string error;
  DataType dtype = DataType::Float32;
  ReduceOp reduce_op = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  std::int32_t root = 0;
  // Allreduce: element count of each name (a joined rank contributes zeros of this size).
  std::vector<std::int64_t> sizes;
  // Shape of rank 0's (or the first submitting rank's) tensor: the rows' shape for
  // allgather and alltoall (dimensions after the first).
  Shape shape;
  // Allgather: first dimension of each rank. Alltoall: rows sent, row-major
  // [sender][receiver], size*size entries.
  std::vector<std::int64_t> rank_rows;
  std::int32_t last_joined = -1;  // Join

  bool operator==(const Response&) const = default;
};

// The wire format's limits, which bound what a message can make its reader
// allocate. A request past them would break the coordinator's message for every
// rank; it is refused at the call instead.
inline constexpr std::size_t kMaxNameBytes = 4096;
inline constexpr std::size_t kMaxDims = 64;
inline constexpr std::size_t kMaxSplits = std::size_t{1} << 20;

// Throws InvalidArgumentError when `request` is past those limits.
void check_sendable(const Request& request);

std::vector<std::uint8_t> encode_requests(const std::vector<Request>& requests);
std::vector<Request> decode_requests(std::span<const std::uint8_t> bytes);
std::vector<std::uint8_t> encode_responses(const std::vector<Response>& responses);
std::vector<Response> decode_responses(std::span<const std::uint8_t> bytes);

}  // namespace kolo::engine
