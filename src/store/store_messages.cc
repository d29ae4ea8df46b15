#include "store/store_messages.h"

#include <cstring>
#include <stdexcept>

#include "common/wire.h"

namespace kolo::store::protocol {
namespace {

bool takes_one_key(Opcode op) { return op != Opcode::Wait && op != Opcode::Check; }

std::vector<std::string> read_keys(wire::Reader& r) {
  const std::uint32_t n = r.get_count(kMaxKeysPerRequest, kMinKeyBytes);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.get_string(kMaxKey));
  return keys;
}

template <typename ReadFields>
auto read_exactly(const Reply& reply, ReadFields&& read_fields) {
  wire::Reader r(reply.fields);
  auto result = read_fields(r);
  r.expect_done();
  return result;
}

}  // namespace

std::optional<std::span<const std::uint8_t>> front_frame(std::span<const std::uint8_t> input) {
  if (input.size() < 4) return std::nullopt;
  const std::uint32_t length = std::uint32_t{input[0]} | (std::uint32_t{input[1]} << 8) |
                               (std::uint32_t{input[2]} << 16) | (std::uint32_t{input[3]} << 24);
  if (length > kMaxFrame) {
    throw wire::WireError("frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                          std::to_string(kMaxFrame));
  }
  if (input.size() - 4 < length) return std::nullopt;
  return input.subspan(4, length);
}

Request parse_request(std::span<const std::uint8_t> payload) {
  wire::Reader r(payload);
  Request request;
  const auto opcode = r.get<std::uint8_t>();
  request.op = static_cast<Opcode>(opcode);
  switch (request.op) {
    case Opcode::Set: {
      request.keys.push_back(r.get_string(kMaxKey));
      const auto value = r.get_bytes(kMaxValue);
      request.value.assign(value.begin(), value.end());
      break;
    }
    case Opcode::Get:
      request.keys.push_back(r.get_string(kMaxKey));
      request.timeout_ms = r.get<std::uint32_t>();
      break;
    case Opcode::Add:
      request.keys.push_back(r.get_string(kMaxKey));
      request.delta = r.get<std::int64_t>();
      break;
    case Opcode::Wait:
      request.keys = read_keys(r);
      request.timeout_ms = r.get<std::uint32_t>();
      break;
    case Opcode::Check:
      request.keys = read_keys(r);
      break;
    case Opcode::Delete:
      request.keys.push_back(r.get_string(kMaxKey));
      break;
    default:
      throw wire::WireError("unknown opcode " + std::to_string(opcode));
  }
  r.expect_done();
  return request;
}

std::vector<std::uint8_t> encode_request_frame(const Request& request) {
  if (takes_one_key(request.op) && request.keys.size() != 1) {
    throw std::logic_error("a store request of this kind takes exactly one key");
  }
  wire::Writer w;
  w.bytes().reserve(64);  // also keeps GCC 12 from a false -Wstringop-overflow on the first insert
  w.put<std::uint32_t>(0);  // the length, filled in below
  w.put(request.op);
  if (takes_one_key(request.op)) {
    w.put_string(request.keys.front());
  } else {
    w.put<std::uint32_t>(static_cast<std::uint32_t>(request.keys.size()));
    for (const auto& key : request.keys) w.put_string(key);
  }
  switch (request.op) {
    case Opcode::Set: w.put_bytes(request.value); break;
    case Opcode::Get:
    case Opcode::Wait: w.put(request.timeout_ms); break;
    case Opcode::Add: w.put(request.delta); break;
    case Opcode::Check:
    case Opcode::Delete: break;
  }
  std::vector<std::uint8_t> frame = w.take();
  const auto length = static_cast<std::uint32_t>(frame.size() - 4);
  std::memcpy(frame.data(), &length, sizeof(length));
  return frame;
}

Reply parse_reply(std::span<const std::uint8_t> payload) {
  if (payload.empty()) throw wire::WireError("empty reply");
  const std::uint8_t status = payload[0];
  if (status != static_cast<std::uint8_t>(Status::Ok) && status != static_cast<std::uint8_t>(Status::Timeout) &&
      status != static_cast<std::uint8_t>(Status::Error)) {
    throw wire::WireError("unknown status " + std::to_string(status));
  }
  return Reply{static_cast<Status>(status), std::vector<std::uint8_t>(payload.begin() + 1, payload.end())};
}

std::vector<std::uint8_t> reply_value(const Reply& reply) {
  return read_exactly(reply, [](wire::Reader& r) {
    const auto value = r.get_bytes(kMaxValue);
    return std::vector<std::uint8_t>(value.begin(), value.end());
  });
}

std::int64_t reply_integer(const Reply& reply) {
  return read_exactly(reply, [](wire::Reader& r) { return r.get<std::int64_t>(); });
}

bool reply_flag(const Reply& reply) {
  return read_exactly(reply, [](wire::Reader& r) { return r.get_flag(); });
}

std::string reply_error_message(const Reply& reply) {
  return read_exactly(reply, [](wire::Reader& r) { return r.get_string(kMaxFrame); });
}

}  // namespace kolo::store::protocol
