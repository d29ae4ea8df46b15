// TCP socket helpers shared by the rendezvous store (src/store/) and kolo's TCP
// communicator (src/comm/tcp/): an owning fd, listen/connect, and blocking I/O
// with deadlines. Every call retries on EINTR and never raises SIGPIPE.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <stdexcept>

namespace kolo::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

// Owns a file descriptor; closes it on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Raised by the helpers below. `timed_out` distinguishes a passed deadline from a
// broken connection; `closed` an orderly close by the peer.
class SocketError : public std::runtime_error {
 public:
  enum class Kind { Failed, TimedOut, Closed };
  SocketError(Kind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// A non-blocking listening socket on host:port (port 0 picks a free one), with
// SO_REUSEADDR and close-on-exec.
Fd listen_tcp(const std::string& host, int port, int backlog);
int local_port(int fd);
// "address:port" of the other end, or "unknown peer".
std::string peer_address(int fd);

// Connects once, giving up at `deadline`. Throws SocketError (Failed for refused or
// unreachable, TimedOut when the deadline passes first). The returned socket is
// blocking, close-on-exec, with TCP_NODELAY.
Fd connect_tcp(const std::string& host, int port, Deadline deadline);
// Retries connect_tcp with backoff until `deadline`, for servers that may not
// listen yet.
Fd connect_tcp_retrying(const std::string& host, int port, Deadline deadline);

// Blocking I/O that gives up at `deadline` (Deadline::max() waits forever).
void write_all(int fd, const void* data, std::size_t size, Deadline deadline);
void read_exact(int fd, void* data, std::size_t size, Deadline deadline);

void set_nonblocking(int fd);
void set_no_delay(int fd);
// TCP_CONGESTION: false (errno set) when the kernel refuses the name (unknown, or
// not in net.ipv4.tcp_allowed_congestion_control for an unprivileged process).
bool set_congestion_control(int fd, const std::string& name);
// An IPv4 127/8 address, ::1, or an IPv4-mapped 127/8 one.
bool is_loopback(const sockaddr& addr);
// Whether the other end is on this host: a loopback address, or the socket's own
// address (the kernel carries a connection to a local address over loopback).
bool peer_is_local(int fd);

// Deadline `timeout` from now, saturating instead of overflowing for huge timeouts.
Deadline deadline_after(std::chrono::milliseconds timeout);

}  // namespace kolo::net
