#include "comm/tcp/tcp_accept.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <list>
#include <string>

#include "common/logging.h"
#include "kolo/error.h"
#include "net/accept.h"

namespace kolo::comm::tcp {
namespace {

using net::Clock;
using net::Deadline;

// Connections accepted per wake before those waiting are served again, so that a
// flood of new ones cannot push out a peer whose Hello has arrived.
constexpr int kAcceptBatch = 16;

int poll_ms(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1000));
}

// An accepted connection between its challenge and its Hello.
struct Pending {
  net::Fd fd;
  std::string from;
  Nonce challenge;
  std::array<std::uint8_t, kHelloBytes> hello{};
  std::size_t got = 0;
  Deadline deadline;
  bool readable = false;  // by the last poll
};

class Acceptor {
 public:
  Acceptor(const MeshSetup& s, net::Fd listener, std::vector<net::Fd>& fds)
      : s_(s),
        listener_(std::move(listener)),
        fds_(fds),
        me_(s.group->member_name(s.group->rank)),
        pause_("tcp: " + me_) {}

  void run(Deadline deadline) {
    const MeshGroup& g = *s_.group;
    int expected = 0;
    for (int r = g.rank + 1; r < g.size; ++r) expected += g.linked(g.rank, r) ? 1 : 0;
    while (connected_ < expected) {
      const Deadline now = Clock::now();
      if (now >= deadline) throw TimeoutError(missing_ranks());
      pause_.end_if_over(now);
      // poll skips a negative descriptor: the listener while it rests.
      std::vector<pollfd> fds{{pause_.resting() ? -1 : listener_.get(), POLLIN, 0}};
      for (auto& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
      Deadline next = std::min(deadline, pause_.until().value_or(deadline));
      for (auto& p : pending_) next = std::min(next, p.deadline);
      if (::poll(fds.data(), fds.size(), poll_ms(next)) < 0 && errno != EINTR)
        throw Error(std::string("tcp: poll failed: ") + std::strerror(errno));
      std::size_t i = 1;
      for (auto& p : pending_) p.readable = fds[i++].revents != 0;
      if (fds[0].revents != 0) accept_some();
      // Only those with something to read or out of time: a flood's idle ones cost nothing.
      const Deadline after = Clock::now();
      for (auto p = pending_.begin(); p != pending_.end();)
        p = (p->readable || after >= p->deadline) && serve(p) ? pending_.erase(p) : std::next(p);
    }
  }

 private:
  std::string missing_ranks() const {
    const MeshGroup& g = *s_.group;
    std::string missing;
    for (int r = g.rank + 1; r < g.size; ++r)
      if (g.linked(g.rank, r) && !fds_[r].valid()) missing += (missing.empty() ? "" : ", ") + g.member_name(r);
    return "tcp: " + missing + " did not connect within " + std::to_string(s_.connect_timeout.count()) +
           " ms (KOLO_START_TIMEOUT)";
  }

  void accept_some() {
    for (int i = 0; i < kAcceptBatch; ++i) {
      net::Fd fd;
      const net::AcceptResult result = net::accept_connection(listener_.get(), fd);
      if (result == net::AcceptResult::NoneWaiting) return;
      if (result == net::AcceptResult::OutOfDescriptors) {
        // A stranger's descriptor is worth less than the connection waiting, which
        // may be a peer's; with none to close, rest rather than spin.
        if (pending_.empty()) {
          pause_.start();
          return;
        }
        displace_oldest("closed to make room: out of descriptors (" + std::string(std::strerror(errno)) + ")");
        continue;
      }
      if (pending_.size() >= net::kMaxUnauthenticated)
        displace_oldest("displaced by a newer connection: more than " + std::to_string(net::kMaxUnauthenticated) +
                        " were authenticating at once");
      challenge(std::move(fd));
    }
  }

  void challenge(net::Fd fd) {
    Pending p;
    p.from = net::peer_address(fd.get());
    p.challenge = random_nonce();
    p.deadline = net::deadline_after(s_.handshake_timeout);
    const auto message = challenge_message(p.challenge);
    // A fresh socket's send buffer always takes 40 bytes.
    const bool sent =
        ::send(fd.get(), message.data(), message.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(message.size());
    p.fd = std::move(fd);
    if (!sent) {
      refuse(p, "it closed before the challenge");
      return;
    }
    pending_.push_back(std::move(p));
  }

  // Closes the oldest connection still authenticating, after serving it one last
  // time: one whose Hello has arrived is judged, not closed unheard.
  void displace_oldest(const std::string& why) {
    while (!pending_.empty()) {
      const int connected = connected_;
      auto oldest = pending_.begin();
      if (!serve(oldest)) refuse(*oldest, why);
      pending_.erase(oldest);
      if (connected_ == connected) return;  // its descriptor is free
    }
  }

  // True when `p` is finished with (connected or refused).
  bool serve(std::list<Pending>::iterator p) {
    while (p->got < p->hello.size()) {
      ssize_t n = ::recv(p->fd.get(), p->hello.data() + p->got, p->hello.size() - p->got, MSG_DONTWAIT);
      if (n > 0) {
        p->got += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (Clock::now() < p->deadline) return false;
        return refuse(*p, "it did not complete the handshake within " + std::to_string(s_.handshake_timeout.count()) +
                              " ms");
      }
      return refuse(*p, n == 0 ? "it closed during the handshake" : std::string("read failed: ") + std::strerror(errno));
    }
    const MeshGroup& g = *s_.group;
    HelloVerdict v = check_hello(s_.keys, p->hello, p->challenge, g.rank);
    if (!v.refusal.empty()) return refuse(*p, v.refusal);
    if (v.initiator <= g.rank || v.initiator >= g.size || !g.linked(g.rank, v.initiator))
      return refuse(*p, "it claims member " + std::to_string(v.initiator) + " of the group, which does not connect to this one");
    if (fds_[v.initiator].valid()) return refuse(*p, g.member_name(v.initiator) + " is already connected");
    const Mac welcome = welcome_message(s_.keys, p->challenge, v.initiator_nonce, v.initiator, g.rank);
    if (::send(p->fd.get(), welcome.data(), welcome.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(welcome.size()))
      return refuse(*p, "it closed before the welcome");
    fds_[v.initiator] = std::move(p->fd);
    ++connected_;
    return true;
  }

  // A flood of strangers is one warning line a second.
  bool refuse(Pending& p, const std::string& why) {
    refusals_.warn("tcp: " + me_ + " refused a connection from " + p.from + ": " + why);
    p.fd.reset();
    return true;
  }

  const MeshSetup& s_;
  net::Fd listener_;
  std::vector<net::Fd>& fds_;
  const std::string me_;
  std::list<Pending> pending_;  // oldest first
  int connected_ = 0;
  net::AcceptPause pause_;
  log::Throttle refusals_{std::chrono::seconds(1)};
};

}  // namespace

void accept_peers(const MeshSetup& setup, net::Fd listener, std::vector<net::Fd>& fds, net::Deadline deadline) {
  Acceptor(setup, std::move(listener), fds).run(deadline);
}

}  // namespace kolo::comm::tcp
