#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace kolo::net {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void fail(const std::string& what, int err) {
  throw SocketError(SocketError::Kind::Failed, what + ": " + errno_text(err));
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoPtr resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    throw SocketError(SocketError::Kind::Failed, "cannot resolve " + host + ": " + gai_strerror(rc));
  }
  return AddrInfoPtr(result);
}

// Milliseconds left until `deadline` as a poll() timeout: -1 for "forever", and
// rounded up so that we do not spin on sub-millisecond remainders.
int poll_timeout(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 1 << 30));
}

// Waits until `fd` is ready for `events`; throws TimedOut at the deadline.
void wait_ready(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd pfd{fd, events, 0};
    int rc = ::poll(&pfd, 1, poll_timeout(deadline));
    if (rc > 0) return;
    if (rc == 0) throw SocketError(SocketError::Kind::TimedOut, std::string(what) + " timed out");
    if (errno != EINTR) fail(std::string("poll while ") + what, errno);
  }
}

std::string format_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (addr.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(addr);
    inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    port = ntohs(in.sin_port);
    return std::string(host) + ":" + std::to_string(port);
  }
  if (addr.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(addr);
    inet_ntop(AF_INET6, &in6.sin6_addr, host, sizeof(host));
    port = ntohs(in6.sin6_port);
    std::string out = "[";
    out += host;
    out += "]:";
    out += std::to_string(port);
    return out;
  }
  return "unknown peer";
}

Fd connect_one(const addrinfo& ai, Deadline deadline) {
  Fd fd(::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol));
  if (!fd.valid()) fail("socket", errno);
  int rc = ::connect(fd.get(), ai.ai_addr, ai.ai_addrlen);
  if (rc != 0 && errno != EINPROGRESS && errno != EINTR) fail("connect", errno);
  if (rc != 0) {
    wait_ready(fd.get(), POLLOUT, deadline, "connect");
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) fail("getsockopt", errno);
    if (err != 0) fail("connect", err);
  }
  int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) fail("fcntl", errno);
  set_no_delay(fd.get());
  return fd;
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Fd listen_tcp(const std::string& host, int port, int backlog) {
  AddrInfoPtr infos = resolve(host, port, true);
  int last_errno = 0;
  for (addrinfo* ai = infos.get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      last_errno = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0) return fd;
    last_errno = errno;
  }
  fail("cannot listen on " + host + ":" + std::to_string(port), last_errno);
}

int local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) fail("getsockname", errno);
  if (addr.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port);
  throw SocketError(SocketError::Kind::Failed, "socket is not TCP");
}

std::string peer_address(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "unknown peer";
  return format_address(addr);
}

Fd connect_tcp(const std::string& host, int port, Deadline deadline) {
  AddrInfoPtr infos = resolve(host, port, false);
  std::string last_error = "no address for " + host;
  for (addrinfo* ai = infos.get(); ai != nullptr; ai = ai->ai_next) {
    try {
      return connect_one(*ai, deadline);
    } catch (const SocketError& e) {
      if (e.kind() == SocketError::Kind::TimedOut) throw;
      last_error = e.what();
    }
  }
  throw SocketError(SocketError::Kind::Failed, last_error);
}

Fd connect_tcp_retrying(const std::string& host, int port, Deadline deadline) {
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    try {
      return connect_tcp(host, port, deadline);
    } catch (const SocketError& e) {
      if (e.kind() == SocketError::Kind::TimedOut || Clock::now() >= deadline) {
        throw SocketError(SocketError::Kind::TimedOut, std::string(e.what()) + " (gave up retrying)");
      }
    }
    // Sleep no further than the deadline, so the last attempt happens right at it.
    std::this_thread::sleep_until(std::min(deadline, Clock::now() + backoff));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

void write_all(int fd, const void* data, std::size_t size, Deadline deadline) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, "send");
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      throw SocketError(SocketError::Kind::Closed, "connection closed by peer");
    }
    fail("send", errno);
  }
}

void read_exact(int fd, void* data, std::size_t size, Deadline deadline) {
  auto* p = static_cast<std::uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::recv(fd, p, size, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw SocketError(SocketError::Kind::Closed, "connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline, "recv");
      continue;
    }
    if (errno == ECONNRESET) throw SocketError(SocketError::Kind::Closed, "connection reset by peer");
    fail("recv", errno);
  }
}

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) fail("fcntl", errno);
}

void set_no_delay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool set_congestion_control(int fd, const std::string& name) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0;
}

bool is_loopback(const sockaddr& addr) {
  if (addr.sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr) >> 24) == 127;
  if (addr.sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

bool peer_is_local(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 || local.ss_family != peer.ss_family)
    return false;
  if (is_loopback(reinterpret_cast<const sockaddr&>(peer))) return true;
  if (peer.ss_family == AF_INET)
    return reinterpret_cast<const sockaddr_in&>(local).sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr;
  if (peer.ss_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6&>(local).sin6_addr,
                       &reinterpret_cast<const sockaddr_in6&>(peer).sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

Deadline deadline_after(std::chrono::milliseconds timeout) {
  auto now = Clock::now();
  if (timeout.count() < 0) return now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now)) return Deadline::max();
  return now + timeout;
}

}  // namespace kolo::net
