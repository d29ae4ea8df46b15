// The store's frames, requests and replies as plain values: the parsing half of
// the protocol in store_protocol.h, kept apart from sockets and from the table so
// that the server, the client and the fuzzers (fuzz/) share one implementation.
// Every function throws wire::WireError on malformed input, after bounding each
// length and count by the protocol's limits and by the bytes actually present.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "store/store_protocol.h"

namespace kolo::store::protocol {

// The payload of the first complete frame at the front of `input`, or nullopt
// while more bytes are needed. A length over kMaxFrame is malformed.
std::optional<std::span<const std::uint8_t>> front_frame(std::span<const std::uint8_t> input);

// One request, as the server reads it from a frame's payload.
struct Request {
  Opcode op = Opcode::Set;
  std::vector<std::string> keys{};   // exactly one for SET, GET, ADD and DELETE
  std::vector<std::uint8_t> value{}; // SET
  std::int64_t delta = 0;            // ADD
  std::uint32_t timeout_ms = 0;      // GET, WAIT

  bool operator==(const Request&) const = default;
};

// Exactly one well-formed request: an unknown opcode, a field over its limit,
// truncation or trailing bytes are malformed.
Request parse_request(std::span<const std::uint8_t> payload);
// The whole frame (length prefix and payload) for `request`; the fields an opcode
// does not use are not sent.
std::vector<std::uint8_t> encode_request_frame(const Request& request);

// One reply, as the client reads it from a frame's payload: the status byte and
// the fields after it, which depend on the request (see store_protocol.h).
struct Reply {
  Status status = Status::Ok;
  std::vector<std::uint8_t> fields;
};
// Rejects an empty payload and an unknown status.
Reply parse_reply(std::span<const std::uint8_t> payload);
// The fields of each kind of reply; anything but exactly those fields is malformed.
std::vector<std::uint8_t> reply_value(const Reply& reply);  // GET: Ok
std::int64_t reply_integer(const Reply& reply);             // ADD: Ok
bool reply_flag(const Reply& reply);                        // CHECK, DELETE: Ok
std::string reply_error_message(const Reply& reply);        // any: Error

}  // namespace kolo::store::protocol
