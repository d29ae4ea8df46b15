// StoreServer: one thread runs an epoll loop over the listening socket, a wakeup
// eventfd (for shutdown) and every client connection. All store state lives on that
// thread, so nothing but the rejection counter needs a lock or an atomic.
//
// Connections are never deleted while an event for them may still be in hand: a
// failing connection is "dropped" (socket shut down and closed, waits forgotten)
// and erased at the end of the loop iteration.
#include "store/store_server_impl.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/logging.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/random_bytes.h"
#include "store/store_messages.h"

namespace kolo::store {

using namespace server_detail;

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
    net::Fd accepted;
    const net::AcceptResult result = net::accept_connection(listener_.get(), accepted);
    if (result == net::AcceptResult::OutOfDescriptors) {
      accept_pause_.start();
      set_listener_enabled(false);
    }
    if (result != net::AcceptResult::Accepted) return;
    const int fd = accepted.get();
    auto c = std::make_unique<Connection>();
    c->fd = std::move(accepted);
    c->peer = net::peer_address(fd);
    if (connections_.size() >= options_.max_connections) {
      rejection_warnings_.warn("store: refused connection from " + c->peer + ": already serving " +
                               std::to_string(connections_.size()) + " connections");
      rejected_.fetch_add(1);
      ::shutdown(fd, SHUT_RDWR);
      continue;
    }
    if (unauthenticated_count_ >= options_.max_unauthenticated) displace_unauthenticated();
    net::set_no_delay(fd);
    c->id = next_id_++;
    unauthenticated_.push_back(c->id);
    ++unauthenticated_count_;
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

void StoreServer::Impl::compact_input(Connection& c) {
  if (c.input_start == 0) return;
  if (c.pending_input() == 0) {
    // Release the memory of a large request rather than keep it per connection.
    if (c.input.capacity() > 4 * kReadChunk) std::vector<std::uint8_t>().swap(c.input);
    c.input.clear();
  } else {
    c.input.erase(c.input.begin(), c.input.begin() + static_cast<std::ptrdiff_t>(c.input_start));
  }
  c.input_start = 0;
}

void StoreServer::Impl::read_input(Connection& c) {
  compact_input(c);
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
        if (c.pending_input() < proto::kMacSize) break;
        check_handshake(c);
        continue;
      }
      const auto payload = proto::front_frame(c.unread());
      if (!payload) break;
      c.input_start += 4 + payload->size();
      handle_request(c, *payload);
    }
    if (c.pending_input() == 0) compact_input(c);
  } catch (const wire::WireError& e) {
    drop(c, std::string("malformed request: ") + e.what(), true);
  }
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

void StoreServer::Impl::displace_unauthenticated() {
  while (!unauthenticated_.empty()) {
    Connection* oldest = find(unauthenticated_.front());
    unauthenticated_.pop_front();
    if (oldest == nullptr || oldest->authenticated) continue;
    drop(*oldest,
         "displaced, unauthenticated, by a newer connection (more than " +
             std::to_string(options_.max_unauthenticated) + " connections were authenticating at once)",
         true);
    return;
  }
}

void StoreServer::Impl::drop(Connection& c, const std::string& why, bool rejection,
                             std::optional<std::uint8_t> farewell) {
  if (c.dead) return;
  c.dead = true;
  if (!c.authenticated) --unauthenticated_count_;
  // Counted before the farewell goes out, so that a client that sees it also sees
  // the count.
  if (rejection) {
    rejected_.fetch_add(1);
    rejection_warnings_.warn("store: closed connection from " + c.peer + ": " + why);
  } else {
    KOLO_LOG(Debug, "store: connection from " << c.peer << " ended: " << why);
  }
  if (farewell) (void)::send(c.fd.get(), &*farewell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (c.parked) table_.unpark(c.id);
  c.parked.reset();
  if (c.interest != 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  // shutdown reaches the peer even where a forked child still holds a copy of the fd.
  ::shutdown(c.fd.get(), SHUT_RDWR);
  c.fd.reset();
}

void StoreServer::Impl::expire_deadlines() {
  const Deadline now = Clock::now();
  if (accept_pause_.end_if_over(now)) set_listener_enabled(true);
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
  std::optional<Deadline> earliest = accept_pause_.until();
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
  // Ids at the front that wait for nothing any more: closed or authenticated.
  while (!unauthenticated_.empty()) {
    const Connection* front = find(unauthenticated_.front());
    if (front != nullptr && !front->authenticated) break;
    unauthenticated_.pop_front();
  }
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
