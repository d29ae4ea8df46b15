// StoreServer's handshake check and command handling: everything that reads a
// request and decides the reply. The loop and I/O are in store_server.cc.
#include <cstring>

#include "common/hmac.h"
#include "store/store_messages.h"
#include "store/store_server_impl.h"

namespace kolo::store {
namespace {

using namespace server_detail;

// A reply frame under construction: length placeholder, then the status byte.
wire::Writer start_reply(proto::Status status) {
  wire::Writer w;
  w.bytes().reserve(64);  // also keeps GCC 12 from a false -Wstringop-overflow on the first insert
  w.put<std::uint32_t>(0);
  w.put(status);
  return w;
}

}  // namespace

void StoreServer::Impl::check_handshake(Connection& c) {
  const auto mac = c.unread().first(proto::kMacSize);
  c.input_start += proto::kMacSize;
  const auto key = std::span(reinterpret_cast<const std::uint8_t*>(secret_.data()), secret_.size());
  const auto expected = crypto::hmac_sha256(key, c.nonce);
  if (!crypto::constant_time_equal(mac, expected)) {
    return drop(c, "wrong job secret (the handshake MAC does not match)", true, proto::kHandshakeRefused);
  }
  c.authenticated = true;
  --unauthenticated_count_;
  const std::uint8_t accepted = proto::kHandshakeAccepted;
  queue_raw(c, {&accepted, 1});
  flush(c);
}

void StoreServer::Impl::handle_request(Connection& c, std::span<const std::uint8_t> payload) {
  // parse_request gives SET, GET, ADD and DELETE exactly one key.
  proto::Request request = proto::parse_request(payload);
  switch (request.op) {
    case proto::Opcode::Set: {
      const std::string& key = request.keys.front();
      auto woken = table_.set(key, std::move(request.value));
      queue_reply(c, start_reply(proto::Status::Ok));
      return wake(woken);
    }
    case proto::Opcode::Get: {
      const std::string& key = request.keys.front();
      if (const auto* value = table_.find(key)) {
        wire::Writer reply = start_reply(proto::Status::Ok);
        reply.put_bytes(*value);
        return queue_reply(c, std::move(reply));
      }
      return park(c, proto::Opcode::Get, std::move(request.keys), request.timeout_ms);
    }
    case proto::Opcode::Add: {
      const std::string& key = request.keys.front();
      std::vector<StoreTable::WaiterId> woken;
      auto result = table_.add(key, request.delta, woken);
      if (!result) {
        wire::Writer reply = start_reply(proto::Status::Error);
        reply.put_string("store add: the value at key '" + key + "' is not an 8-byte integer");
        return queue_reply(c, std::move(reply));
      }
      wire::Writer reply = start_reply(proto::Status::Ok);
      reply.put(*result);
      queue_reply(c, std::move(reply));
      return wake(woken);
    }
    case proto::Opcode::Wait:
      return park(c, proto::Opcode::Wait, std::move(request.keys), request.timeout_ms);
    case proto::Opcode::Check: {
      wire::Writer reply = start_reply(proto::Status::Ok);
      reply.put<std::uint8_t>(table_.contains_all(request.keys) ? 1 : 0);
      return queue_reply(c, std::move(reply));
    }
    case proto::Opcode::Delete: {
      const std::string& key = request.keys.front();
      wire::Writer reply = start_reply(proto::Status::Ok);
      reply.put<std::uint8_t>(table_.erase(key) ? 1 : 0);
      return queue_reply(c, std::move(reply));
    }
  }
}

void StoreServer::Impl::park(Connection& c, proto::Opcode op, std::vector<std::string> keys,
                             std::uint32_t timeout_ms) {
  std::string get_key = op == proto::Opcode::Get ? keys.front() : std::string();
  if (!table_.park(c.id, std::move(keys))) return queue_reply(c, start_reply(proto::Status::Ok));
  c.parked = ParkedRequest{op, std::move(get_key), net::deadline_after(std::chrono::milliseconds(timeout_ms))};
  // A zero timeout means "only if already there": answer at once.
  if (timeout_ms == 0) complete_parked(c, true);
}

void StoreServer::Impl::wake(const std::vector<StoreTable::WaiterId>& ids) {
  for (StoreTable::WaiterId id : ids) {
    Connection* c = find(id);
    if (c == nullptr || !c->parked) continue;
    complete_parked(*c, false);
    update_interest(*c);
    resumable_.push_back(id);
  }
}

void StoreServer::Impl::complete_parked(Connection& c, bool timed_out) {
  const ParkedRequest request = std::move(*c.parked);
  c.parked.reset();
  if (timed_out) {
    table_.unpark(c.id);
    return queue_reply(c, start_reply(proto::Status::Timeout));
  }
  wire::Writer reply = start_reply(proto::Status::Ok);
  if (request.op == proto::Opcode::Get) {
    const auto* value = table_.find(request.key);
    reply.put_bytes(value ? *value : StoreTable::Bytes{});
  }
  queue_reply(c, std::move(reply));
}

void StoreServer::Impl::queue_reply(Connection& c, wire::Writer reply) {
  std::vector<std::uint8_t>& bytes = reply.bytes();
  const auto length = static_cast<std::uint32_t>(bytes.size() - 4);
  std::memcpy(bytes.data(), &length, sizeof(length));
  if (c.pending_output() == 0) {
    // Common case: hand the buffer over instead of copying a possibly large value.
    c.output = reply.take();
    c.output_start = 0;
  } else {
    c.output.insert(c.output.end(), bytes.begin(), bytes.end());
  }
  flush(c);
}

}  // namespace kolo::store
