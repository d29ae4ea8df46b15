// The StoreServer's internals, shared by its two source files: store_server.cc
// (the event loop, connections and their I/O) and store_requests.cc (the
// handshake and the commands). Everything here runs on the server's one thread,
// except the constructor, the destructor and the rejection counter.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "common/wire.h"
#include "net/accept.h"
#include "net/socket.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "store/store_table.h"

namespace kolo::store {
namespace server_detail {

using net::Clock;
using net::Deadline;
namespace proto = protocol;

inline constexpr std::uint64_t kListenerTag = 0;
inline constexpr std::uint64_t kWakeTag = 1;
inline constexpr std::uint64_t kFirstConnectionId = 2;

inline constexpr std::size_t kReadChunk = 256 * 1024;
// One maximal frame plus one read's worth; a client never needs more buffered.
inline constexpr std::size_t kMaxBufferedInput = 4 + proto::kMaxFrame + kReadChunk;
// Stop executing a client's requests while this much of its output is unsent.
inline constexpr std::size_t kOutputHighWater = 1 << 20;

// A GET or WAIT waiting on the table for its keys or its deadline.
struct ParkedRequest {
  proto::Opcode op;
  std::string key;  // GET only
  Deadline deadline;
};

// One client. Buffers are consumed from *_start and compacted now and then.
struct Connection {
  std::uint64_t id = 0;
  net::Fd fd;
  std::string peer;
  bool dead = false;
  bool authenticated = false;
  std::array<std::uint8_t, proto::kNonceSize> nonce{};
  Deadline handshake_deadline;
  std::vector<std::uint8_t> input;
  std::size_t input_start = 0;
  std::vector<std::uint8_t> output;
  std::size_t output_start = 0;
  std::optional<ParkedRequest> parked;
  std::uint32_t interest = 0;

  std::size_t pending_input() const { return input.size() - input_start; }
  std::size_t pending_output() const { return output.size() - output_start; }
  std::span<const std::uint8_t> unread() const { return {input.data() + input_start, pending_input()}; }
};

}  // namespace server_detail

struct StoreServer::Impl {
  using Connection = server_detail::Connection;
  using Deadline = server_detail::Deadline;

  Impl(std::string secret, const std::string& bind_host, int port, StoreServerOptions options);
  ~Impl();

  void run();
  void accept_new();
  void on_event(Connection& c, std::uint32_t events);
  void read_input(Connection& c);
  void compact_input(Connection& c);
  void process_input(Connection& c);
  void check_handshake(Connection& c);
  void handle_request(Connection& c, std::span<const std::uint8_t> payload);
  void park(Connection& c, protocol::Opcode op, std::vector<std::string> keys, std::uint32_t timeout_ms);
  void wake(const std::vector<StoreTable::WaiterId>& ids);
  void complete_parked(Connection& c, bool timed_out);
  void queue_reply(Connection& c, wire::Writer reply);
  void queue_raw(Connection& c, std::span<const std::uint8_t> bytes);
  void flush(Connection& c);
  void update_interest(Connection& c);
  // Closes `c` (erased later by sweep_dead). A rejection is counted and logged as
  // a warning; `farewell`, if any, is sent first on a best-effort basis.
  void drop(Connection& c, const std::string& why, bool rejection, std::optional<std::uint8_t> farewell = {});
  // Makes room for one more unauthenticated connection (closing the oldest).
  void displace_unauthenticated();
  void expire_deadlines();
  int next_timeout_ms() const;
  void set_listener_enabled(bool enabled);
  void sweep_dead();
  void close_all();
  Connection* find(std::uint64_t id);

  const std::string secret_;
  const StoreServerOptions options_;
  net::Fd listener_;
  net::Fd epoll_;
  net::Fd wake_;
  int port_ = 0;
  std::atomic<std::uint64_t> rejected_{0};

  // Owned by the loop thread.
  StoreTable table_;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections_;
  std::vector<std::uint64_t> resumable_;  // parked requests just answered: run their queued input
  std::uint64_t next_id_ = server_detail::kFirstConnectionId;
  net::AcceptPause accept_pause_{"store"};
  bool stopping_ = false;
  // Ids of connections in the order they were accepted, for displacing the oldest
  // unauthenticated one; entries of connections since authenticated or closed are
  // skipped (and dropped) when they reach the front.
  std::deque<std::uint64_t> unauthenticated_;
  std::size_t unauthenticated_count_ = 0;
  // Warnings about rejected connections: a flood of them is one line a second.
  log::Throttle rejection_warnings_{std::chrono::seconds(1)};

  std::thread thread_;  // last: starts once everything above exists
};

}  // namespace kolo::store
