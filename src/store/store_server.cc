// StoreServer: one thread runs an epoll loop over the listening socket, a wakeup
// eventfd (for shutdown) and every client connection. All store state lives on that
// thread, so nothing but the rejection counter needs a lock or an atomic.
//
// Connections are never deleted while an event for them may still be in hand: a
// failing connection is "dropped" (socket shut down and closed, waits forgotten)
// and erased at the end of the loop iteration.
#include "store/store.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/hmac.h"
#include "common/logging.h"
#include "common/wire.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/random_bytes.h"
#include "store/store_protocol.h"
#include "store/store_table.h"

namespace kolo::store {
namespace {

using net::Clock;
using net::Deadline;
namespace proto = protocol;

constexpr std::uint64_t kListenerTag = 0;
constexpr std::uint64_t kWakeTag = 1;
constexpr std::uint64_t kFirstConnectionId = 2;

constexpr std::size_t kReadChunk = 256 * 1024;
// One maximal frame plus one read's worth; a client never needs more buffered.
constexpr std::size_t kMaxBufferedInput = 4 + proto::kMaxFrame + kReadChunk;
// Stop executing a client's requests while this much of its output is unsent.
constexpr std::size_t kOutputHighWater = 1 << 20;
constexpr auto kAcceptPauseOnFdExhaustion = std::chrono::milliseconds(100);

struct ParkedRequest {
  proto::Opcode op;
  std::string key;  // GET only
  Deadline deadline;
};

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

std::uint32_t read_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) | (std::uint32_t{p[3]} << 24);
}

// A reply frame under construction: length placeholder, then the status byte.
wire::Writer start_reply(proto::Status status) {
  wire::Writer w;
  w.bytes().reserve(64);  // also keeps GCC 12 from a false -Wstringop-overflow on the first insert
  w.put<std::uint32_t>(0);
  w.put(status);
  return w;
}

std::vector<std::string> read_keys(wire::Reader& r) {
  std::uint32_t n = r.get_count(proto::kMaxKeysPerRequest, proto::kMinKeyBytes);
  std::vector<std::string> keys;
  keys.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) keys.push_back(r.get_string(proto::kMaxKey));
  return keys;
}

}  // namespace

struct StoreServer::Impl {
  Impl(std::string secret, const std::string& bind_host, int port, StoreServerOptions options);
  ~Impl();

  void run();
  void accept_new();
  void on_event(Connection& c, std::uint32_t events);
  void read_input(Connection& c);
  void process_input(Connection& c);
  void check_handshake(Connection& c);
  void handle_request(Connection& c, std::span<const std::uint8_t> payload);
  void park(Connection& c, proto::Opcode op, std::vector<std::string> keys, std::uint32_t timeout_ms);
  void wake(const std::vector<StoreTable::WaiterId>& ids);
  void complete_parked(Connection& c, bool timed_out);
  void queue_reply(Connection& c, wire::Writer reply);
  void queue_raw(Connection& c, std::span<const std::uint8_t> bytes);
  void flush(Connection& c);
  void update_interest(Connection& c);
  void drop(Connection& c, const std::string& why, bool rejection);
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
  std::uint64_t next_id_ = kFirstConnectionId;
  std::optional<Deadline> accept_paused_until_;
  bool stopping_ = false;

  std::thread thread_;  // last: starts once everything above exists
};

StoreServer::Impl::Impl(std::string secret, const std::string& bind_host, int port, StoreServerOptions options)
    : secret_(std::move(secret)), options_(options) {
  if (secret_.empty()) throw InvalidArgumentError("the store needs a non-empty job secret");
  try {
    listener_ = net::listen_tcp(bind_host, port, SOMAXCONN);
    port_ = net::local_port(listener_.get());
  } catch (const net::SocketError& e) {
    throw Error(std::string("the kolo store cannot listen: ") + e.what());
  }
  epoll_ = net::Fd(epoll_create1(EPOLL_CLOEXEC));
  wake_ = net::Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!epoll_.valid() || !wake_.valid()) throw Error(std::string("store setup failed: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { run(); });
}

StoreServer::Impl::~Impl() {
  std::uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
}

void StoreServer::Impl::run() {
  std::array<epoll_event, 256> events;
  while (!stopping_) {
    int n = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), next_timeout_ms());
    if (n < 0) {
      if (errno == EINTR) continue;
      KOLO_LOG(Error, "store: epoll_wait failed (" << std::strerror(errno) << "); the store stops serving");
      break;
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t tag = events[i].data.u64;
      if (tag == kWakeTag) {
        stopping_ = true;
      } else if (tag == kListenerTag) {
        accept_new();
      } else if (Connection* c = find(tag)) {
        on_event(*c, events[i].events);
      }
    }
    // Parked requests answered during this round may have more requests queued.
    std::vector<std::uint64_t> resumable = std::move(resumable_);
    resumable_.clear();
    for (std::uint64_t id : resumable) {
      if (Connection* c = find(id)) process_input(*c);
    }
    expire_deadlines();
    sweep_dead();
  }
  close_all();
}

Connection* StoreServer::Impl::find(std::uint64_t id) {
  auto it = connections_.find(id);
  return it == connections_.end() || it->second->dead ? nullptr : it->second.get();
}

void StoreServer::Impl::accept_new() {
  for (;;) {
    int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        KOLO_LOG(Warning, "store: cannot accept connections (" << std::strerror(errno) << "); pausing briefly");
        set_listener_enabled(false);
        accept_paused_until_ = Clock::now() + kAcceptPauseOnFdExhaustion;
      }
      return;  // EAGAIN: all pending connections taken
    }
    auto c = std::make_unique<Connection>();
    c->fd = net::Fd(fd);
    c->peer = net::peer_address(fd);
    if (connections_.size() >= options_.max_connections) {
      KOLO_LOG(Warning, "store: refused connection from " << c->peer << ": already serving "
                                                           << connections_.size() << " connections");
      rejected_.fetch_add(1);
      ::shutdown(fd, SHUT_RDWR);
      continue;
    }
    net::set_no_delay(fd);
    c->id = next_id_++;
    c->handshake_deadline = net::deadline_after(options_.handshake_timeout);
    fill_random(c->nonce);
    Connection& conn = *c;
    connections_.emplace(conn.id, std::move(c));
    queue_raw(conn, proto::kMagic);
    queue_raw(conn, conn.nonce);
    flush(conn);
    update_interest(conn);
  }
}

void StoreServer::Impl::on_event(Connection& c, std::uint32_t events) {
  try {
    if (events & EPOLLOUT) flush(c);
    if (!c.dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read_input(c);
    if (!c.dead) process_input(c);
    if (!c.dead) update_interest(c);
  } catch (const std::exception& e) {
    // bad_alloc for a large but legal request, or a bug: cost this client only.
    drop(c, std::string("internal error: ") + e.what(), false);
  }
}

void StoreServer::Impl::read_input(Connection& c) {
  if (c.input_start > 0) {
    c.input.erase(c.input.begin(), c.input.begin() + static_cast<std::ptrdiff_t>(c.input_start));
    c.input_start = 0;
  }
  const std::size_t old_size = c.input.size();
  c.input.resize(old_size + kReadChunk);
  ssize_t n;
  do {
    n = ::recv(c.fd.get(), c.input.data() + old_size, kReadChunk, 0);
  } while (n < 0 && errno == EINTR);
  c.input.resize(old_size + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
  if (n == 0) return drop(c, "closed by peer", false);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    return drop(c, std::string("receive failed: ") + std::strerror(errno), false);
  }
  if (c.pending_input() > kMaxBufferedInput) {
    drop(c, "sent more than " + std::to_string(kMaxBufferedInput) + " bytes without reading the replies", true);
  }
}

void StoreServer::Impl::process_input(Connection& c) {
  try {
    while (!c.dead && !c.parked && c.pending_output() < kOutputHighWater) {
      if (!c.authenticated) {
        if (c.pending_input() < proto::kMacSize) return;
        check_handshake(c);
        continue;
      }
      if (c.pending_input() < 4) return;
      const std::uint32_t length = read_le32(c.unread().data());
      if (length > proto::kMaxFrame) {
        throw wire::WireError("frame of " + std::to_string(length) + " bytes exceeds the limit of " +
                              std::to_string(proto::kMaxFrame));
      }
      if (c.pending_input() < 4 + std::size_t{length}) return;
      auto payload = c.unread().subspan(4, length);
      c.input_start += 4 + length;
      handle_request(c, payload);
    }
  } catch (const wire::WireError& e) {
    drop(c, std::string("malformed request: ") + e.what(), true);
  }
}

void StoreServer::Impl::check_handshake(Connection& c) {
  const auto mac = c.unread().first(proto::kMacSize);
  c.input_start += proto::kMacSize;
  const auto key = std::span(reinterpret_cast<const std::uint8_t*>(secret_.data()), secret_.size());
  const auto expected = crypto::hmac_sha256(key, c.nonce);
  if (!crypto::constant_time_equal(mac, expected)) {
    // Best effort: tell the client why before closing.
    const std::uint8_t refused = proto::kHandshakeRefused;
    (void)::send(c.fd.get(), &refused, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    return drop(c, "wrong job secret (the handshake MAC does not match)", true);
  }
  c.authenticated = true;
  const std::uint8_t accepted = proto::kHandshakeAccepted;
  queue_raw(c, {&accepted, 1});
  flush(c);
}

void StoreServer::Impl::handle_request(Connection& c, std::span<const std::uint8_t> payload) {
  wire::Reader r(payload);
  const auto opcode = r.get<std::uint8_t>();
  switch (static_cast<proto::Opcode>(opcode)) {
    case proto::Opcode::Set: {
      std::string key = r.get_string(proto::kMaxKey);
      auto value = r.get_bytes(proto::kMaxValue);
      r.expect_done();
      auto woken = table_.set(key, StoreTable::Bytes(value.begin(), value.end()));
      queue_reply(c, start_reply(proto::Status::Ok));
      return wake(woken);
    }
    case proto::Opcode::Get: {
      std::string key = r.get_string(proto::kMaxKey);
      const auto timeout_ms = r.get<std::uint32_t>();
      r.expect_done();
      if (const auto* value = table_.find(key)) {
        wire::Writer reply = start_reply(proto::Status::Ok);
        reply.put_bytes(*value);
        return queue_reply(c, std::move(reply));
      }
      return park(c, proto::Opcode::Get, {std::move(key)}, timeout_ms);
    }
    case proto::Opcode::Add: {
      std::string key = r.get_string(proto::kMaxKey);
      const auto delta = r.get<std::int64_t>();
      r.expect_done();
      std::vector<StoreTable::WaiterId> woken;
      auto result = table_.add(key, delta, woken);
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
    case proto::Opcode::Wait: {
      std::vector<std::string> keys = read_keys(r);
      const auto timeout_ms = r.get<std::uint32_t>();
      r.expect_done();
      return park(c, proto::Opcode::Wait, std::move(keys), timeout_ms);
    }
    case proto::Opcode::Check: {
      std::vector<std::string> keys = read_keys(r);
      r.expect_done();
      wire::Writer reply = start_reply(proto::Status::Ok);
      reply.put<std::uint8_t>(table_.contains_all(keys) ? 1 : 0);
      return queue_reply(c, std::move(reply));
    }
    case proto::Opcode::Delete: {
      std::string key = r.get_string(proto::kMaxKey);
      r.expect_done();
      wire::Writer reply = start_reply(proto::Status::Ok);
      reply.put<std::uint8_t>(table_.erase(key) ? 1 : 0);
      return queue_reply(c, std::move(reply));
    }
  }
  throw wire::WireError("unknown opcode " + std::to_string(opcode));
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

void StoreServer::Impl::queue_raw(Connection& c, std::span<const std::uint8_t> bytes) {
  c.output.insert(c.output.end(), bytes.begin(), bytes.end());
}

void StoreServer::Impl::flush(Connection& c) {
  while (!c.dead && c.pending_output() > 0) {
    ssize_t n = ::send(c.fd.get(), c.output.data() + c.output_start, c.pending_output(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.output_start += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    return drop(c, std::string("send failed: ") + std::strerror(errno), false);
  }
  if (c.pending_output() == 0) {
    // Release the memory of a large reply rather than keep it per connection.
    if (c.output.capacity() > kOutputHighWater) std::vector<std::uint8_t>().swap(c.output);
    c.output.clear();
    c.output_start = 0;
  }
}

void StoreServer::Impl::update_interest(Connection& c) {
  if (c.dead) return;
  const std::uint32_t wanted = EPOLLIN | (c.pending_output() > 0 ? EPOLLOUT : 0u);
  if (wanted == c.interest) return;
  epoll_event ev{};
  ev.events = wanted;
  ev.data.u64 = c.id;
  const int op = c.interest == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  if (epoll_ctl(epoll_.get(), op, c.fd.get(), &ev) != 0) {
    return drop(c, std::string("epoll_ctl failed: ") + std::strerror(errno), false);
  }
  c.interest = wanted;
}

void StoreServer::Impl::drop(Connection& c, const std::string& why, bool rejection) {
  if (c.dead) return;
  c.dead = true;
  if (rejection) {
    rejected_.fetch_add(1);
    KOLO_LOG(Warning, "store: closed connection from " << c.peer << ": " << why);
  } else {
    KOLO_LOG(Debug, "store: connection from " << c.peer << " ended: " << why);
  }
  if (c.parked) table_.unpark(c.id);
  c.parked.reset();
  if (c.interest != 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  // shutdown reaches the peer even where a forked child still holds a copy of the fd.
  ::shutdown(c.fd.get(), SHUT_RDWR);
  c.fd.reset();
}

void StoreServer::Impl::expire_deadlines() {
  const Deadline now = Clock::now();
  if (accept_paused_until_ && now >= *accept_paused_until_) {
    accept_paused_until_.reset();
    set_listener_enabled(true);
  }
  for (auto& [id, c] : connections_) {
    if (c->dead) continue;
    if (!c->authenticated && now >= c->handshake_deadline) {
      drop(*c, "did not authenticate within " + std::to_string(options_.handshake_timeout.count()) + " ms", true);
    } else if (c->parked && now >= c->parked->deadline) {
      complete_parked(*c, true);
      update_interest(*c);
      resumable_.push_back(id);
    }
  }
}

int StoreServer::Impl::next_timeout_ms() const {
  if (!resumable_.empty()) return 0;
  std::optional<Deadline> earliest = accept_paused_until_;
  auto consider = [&](Deadline d) {
    if (!earliest || d < *earliest) earliest = d;
  };
  for (const auto& [id, c] : connections_) {
    if (c->dead) continue;
    if (!c->authenticated) consider(c->handshake_deadline);
    if (c->parked) consider(c->parked->deadline);
  }
  if (!earliest || *earliest == Deadline::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*earliest - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1 << 30));
}

void StoreServer::Impl::set_listener_enabled(bool enabled) {
  epoll_event ev{};
  ev.events = enabled ? std::uint32_t{EPOLLIN} : 0u;
  ev.data.u64 = kListenerTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, listener_.get(), &ev);
}

void StoreServer::Impl::sweep_dead() {
  std::erase_if(connections_, [](const auto& entry) { return entry.second->dead; });
}

void StoreServer::Impl::close_all() {
  for (auto& [id, c] : connections_) drop(*c, "store shutting down", false);
  connections_.clear();
  // Stop listening even where forked children hold copies of the listening socket.
  ::shutdown(listener_.get(), SHUT_RDWR);
  listener_.reset();
}

StoreServer::StoreServer(std::string secret, const std::string& bind_host, int port, StoreServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(secret), bind_host, port, options)) {}

StoreServer::~StoreServer() = default;

int StoreServer::port() const { return impl_->port_; }

std::uint64_t StoreServer::rejected_connections() const { return impl_->rejected_.load(); }

}  // namespace kolo::store
