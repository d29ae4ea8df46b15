#include "engine/messages.h"

#include "common/wire.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

// Limits that bound every allocation a message can cause (and messages.h's).
constexpr std::size_t kMaxName = kMaxNameBytes;
constexpr std::size_t kMaxItems = 1 << 20;
constexpr std::size_t kMaxNamesPerResponse = 1 << 20;
constexpr std::size_t kMaxError = 1 << 16;
constexpr std::size_t kMaxRankRows = 1 << 24;
constexpr std::uint8_t kRequestsTag = 0x51;
constexpr std::uint8_t kResponsesTag = 0x52;

template <typename Enum>
Enum checked_enum(std::uint8_t value, std::uint8_t count, const char* what) {
  if (value >= count) throw wire::WireError(std::string("invalid ") + what + " " + std::to_string(value));
  return static_cast<Enum>(value);
}

void put(wire::Writer& w, const Request& r) {
  w.put_string(r.name);
  w.put(static_cast<std::uint8_t>(r.op));
  w.put(static_cast<std::uint8_t>(r.dtype));
  w.put(static_cast<std::uint8_t>(r.reduce_op));
  w.put_vector(r.shape);
  w.put(r.prescale);
  w.put(r.postscale);
  w.put(r.root);
  w.put_vector(r.splits);
  w.put_string(r.group);
  w.put(r.group_size);
  w.put(static_cast<std::uint8_t>(r.racing_site));
}

Request get_request(wire::Reader& in) {
  Request r;
  r.name = in.get_string(kMaxName);
  r.op = checked_enum<OpType>(in.get<std::uint8_t>(), 7, "op");
  r.dtype = checked_enum<DataType>(in.get<std::uint8_t>(), kNumDataTypes, "dtype");
  r.reduce_op = checked_enum<ReduceOp>(in.get<std::uint8_t>(), kNumReduceOps, "reduce op");
  r.shape = in.get_vector<std::int64_t>(kMaxDims);
  r.prescale = in.get<double>();
  r.postscale = in.get<double>();
  r.root = in.get<std::int32_t>();
  r.splits = in.get_vector<std::int64_t>(kMaxSplits);
  r.group = in.get_string(kMaxName);
  r.group_size = in.get<std::int32_t>();
  r.racing_site = in.get_flag();
  return r;
}

void put(wire::Writer& w, const Response& r) {
  w.put(static_cast<std::uint8_t>(r.op));
  w.put<std::uint32_t>(static_cast<std::uint32_t>(r.names.size()));
  for (const auto& n : r.names) w.put_string(n);
  w.put(static_cast<std::uint8_t>(r.error_kind));
  w.put_string(r.error);
  w.put(static_cast<std::uint8_t>(r.dtype));
  w.put(static_cast<std::uint8_t>(r.reduce_op));
  w.put(r.prescale);
  w.put(r.postscale);
  w.put(r.root);
  w.put_vector(r.sizes);
  w.put_vector(r.shape);
  w.put_vector(r.rank_rows);
  w.put(r.last_joined);
}

Response get_response(wire::Reader& in) {
  Response r;
  r.op = checked_enum<OpType>(in.get<std::uint8_t>(), 7, "op");
  auto count = in.get_count(kMaxNamesPerResponse, sizeof(std::uint32_t));
  r.names.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) r.names.push_back(in.get_string(kMaxName));
  r.error_kind = checked_enum<ErrorKind>(in.get<std::uint8_t>(), 3, "error kind");
  r.error = in.get_string(kMaxError);
  r.dtype = checked_enum<DataType>(in.get<std::uint8_t>(), kNumDataTypes, "dtype");
  r.reduce_op = checked_enum<ReduceOp>(in.get<std::uint8_t>(), kNumReduceOps, "reduce op");
  r.prescale = in.get<double>();
  r.postscale = in.get<double>();
  r.root = in.get<std::int32_t>();
  r.sizes = in.get_vector<std::int64_t>(kMaxNamesPerResponse);
  r.shape = in.get_vector<std::int64_t>(kMaxDims);
  r.rank_rows = in.get_vector<std::int64_t>(kMaxRankRows);
  r.last_joined = in.get<std::int32_t>();
  return r;
}

}  // namespace

const char* to_string(OpType op) {
  switch (op) {
    case OpType::Allreduce: return "allreduce";
    case OpType::Allgather: return "allgather";
    case OpType::Broadcast: return "broadcast";
    case OpType::Alltoall: return "alltoall";
    case OpType::Reducescatter: return "reducescatter";
    case OpType::Barrier: return "barrier";
    case OpType::Join: return "join";
  }
  return "invalid";
}

void check_sendable(const Request& r) {
  auto check = [&r](const char* what, std::size_t got, std::size_t limit) {
    if (got <= limit) return;
    // The name itself may be too long to repeat in full.
    const std::string name = r.name.size() > 64 ? r.name.substr(0, 64) + "..." : r.name;
    throw InvalidArgumentError(std::string(to_string(r.op)) + " '" + name + "': " + what + " is " +
                               std::to_string(got) + ", more than kolo allows (" + std::to_string(limit) + ")");
  };
  check("the name's length in bytes", r.name.size(), kMaxNameBytes);
  check("the group name's length in bytes", r.group.size(), kMaxNameBytes);
  check("the number of dimensions", r.shape.size(), kMaxDims);
  check("the number of splits", r.splits.size(), kMaxSplits);
}

std::vector<std::uint8_t> encode_requests(const std::vector<Request>& requests) {
  wire::Writer w;
  w.put(kRequestsTag);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(requests.size()));
  for (const auto& r : requests) put(w, r);
  return w.take();
}

std::vector<Request> decode_requests(std::span<const std::uint8_t> bytes) {
  wire::Reader in(bytes);
  if (in.get<std::uint8_t>() != kRequestsTag) throw wire::WireError("not a request list");
  // Every request takes at least 40 bytes on the wire.
  auto count = in.get_count(kMaxItems, 40);
  std::vector<Request> out;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(get_request(in));
  in.expect_done();
  return out;
}

std::vector<std::uint8_t> encode_responses(const std::vector<Response>& responses) {
  wire::Writer w;
  w.put(kResponsesTag);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(responses.size()));
  for (const auto& r : responses) put(w, r);
  return w.take();
}

std::vector<Response> decode_responses(std::span<const std::uint8_t> bytes) {
  wire::Reader in(bytes);
  if (in.get<std::uint8_t>() != kResponsesTag) throw wire::WireError("not a response list");
  auto count = in.get_count(kMaxItems, 40);
  std::vector<Response> out;
  out.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) out.push_back(get_response(in));
  in.expect_done();
  return out;
}

}  // namespace kolo::engine
