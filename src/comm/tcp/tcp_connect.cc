#include "comm/tcp/tcp_connect.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <list>
#include <string>
#include <thread>

#include "common/env.h"
#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::comm::tcp {
namespace {

using net::Clock;
using net::Deadline;

std::string address_key(const MeshSetup& s, int rank) { return s.keys.group + "tcp/addr/" + std::to_string(rank); }

// "host:port" as published; the host may be a bracketed IPv6 address.
std::pair<std::string, int> split_address(const std::string& text) {
  const auto colon = text.rfind(':');
  std::string host = text.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, std::stoi(text.substr(colon + 1))};
}

std::string publish_form(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int poll_ms(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1000));
}

// Connects to lower rank `peer` and proves this rank; throws on failure.
net::Fd connect_to(const MeshSetup& s, store::StoreClient& store, int peer, Deadline deadline) {
  const GlooGroup& g = *s.group;
  const int me = g.rank;
  const std::string who = g.member_name(peer);
  store::Bytes value;
  try {
    value = store.get(address_key(s, peer), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  } catch (const TimeoutError&) {
    throw TimeoutError("tcp: " + who + " did not publish its address within " +
                       std::to_string(s.connect_timeout.count()) + " ms (KOLO_START_TIMEOUT)");
  }
  const auto [host, port] = split_address(std::string(value.begin(), value.end()));
  try {
    net::Fd fd = net::connect_tcp_retrying(host, port, deadline);
    const Deadline handshake = std::min(deadline, net::deadline_after(s.handshake_timeout));
    std::array<std::uint8_t, kChallengeBytes> challenge;
    net::read_exact(fd.get(), challenge.data(), challenge.size(), handshake);
    Nonce mine;
    const auto hello = hello_message(s.keys, challenge, me, peer, &mine);
    net::write_all(fd.get(), hello.data(), hello.size(), handshake);
    Mac welcome;
    net::read_exact(fd.get(), welcome.data(), welcome.size(), handshake);
    Nonce theirs;
    std::memcpy(theirs.data(), challenge.data() + 8, theirs.size());
    if (!check_welcome(s.keys, welcome, theirs, mine, me, peer))
      throw InvalidArgumentError("it did not prove the job's secret");
    return fd;
  } catch (const net::SocketError& e) {
    throw PeerFailureError(g.job_rank(peer), "tcp: connecting to " + who + " at " + host + ":" + std::to_string(port) +
                                                 " failed: " + e.what());
  } catch (const InvalidArgumentError& e) {
    throw PeerFailureError(g.job_rank(peer), "tcp: " + who + " at " + host + ":" + std::to_string(port) +
                                                 " refused or failed the handshake: " + e.what());
  }
}

// An accepted connection between its challenge and its Hello.
struct Pending {
  net::Fd fd;
  std::string from;
  Nonce challenge;
  std::array<std::uint8_t, kHelloBytes> hello{};
  std::size_t got = 0;
  Deadline deadline;
};

class Acceptor {
 public:
  Acceptor(const MeshSetup& s, net::Fd listener, std::vector<net::Fd>& fds)
      : s_(s), listener_(std::move(listener)), fds_(fds) {}

  // Until every higher linked member is connected; TimeoutError at `deadline`.
  void run(Deadline deadline) {
    const GlooGroup& g = *s_.group;
    int expected = 0;
    for (int r = g.rank + 1; r < g.size; ++r) expected += g.linked(g.rank, r) ? 1 : 0;
    while (connected_ < expected) {
      if (Clock::now() >= deadline) throw TimeoutError(missing_ranks());
      std::vector<pollfd> fds{{listener_.get(), POLLIN, 0}};
      for (auto& p : pending_) fds.push_back({p.fd.get(), POLLIN, 0});
      Deadline next = deadline;
      for (auto& p : pending_) next = std::min(next, p.deadline);
      if (::poll(fds.data(), fds.size(), poll_ms(next)) < 0 && errno != EINTR)
        throw Error(std::string("tcp: poll failed: ") + std::strerror(errno));
      if (fds[0].revents != 0) accept_all();
      for (auto p = pending_.begin(); p != pending_.end();) p = serve(p) ? pending_.erase(p) : std::next(p);
    }
  }

 private:
  std::string missing_ranks() const {
    const GlooGroup& g = *s_.group;
    std::string missing;
    for (int r = g.rank + 1; r < g.size; ++r)
      if (g.linked(g.rank, r) && !fds_[r].valid()) missing += (missing.empty() ? "" : ", ") + g.member_name(r);
    return "tcp: " + missing + " did not connect within " + std::to_string(s_.connect_timeout.count()) +
           " ms (KOLO_START_TIMEOUT)";
  }

  void accept_all() {
    for (;;) {
      int fd = ::accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN, or out of descriptors: retried on the next wake
      }
      Pending p;
      p.fd = net::Fd(fd);
      p.from = net::peer_address(fd);
      p.challenge = random_nonce();
      p.deadline = net::deadline_after(s_.handshake_timeout);
      const auto challenge = challenge_message(p.challenge);
      // A fresh socket's send buffer always takes 40 bytes.
      if (::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(challenge.size())) {
        refuse(p, "it closed before the challenge");
        continue;
      }
      pending_.push_back(std::move(p));
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
    const GlooGroup& g = *s_.group;
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

  bool refuse(Pending& p, const std::string& why) {
    KOLO_LOG(Warning, "tcp: " << s_.group->member_name(s_.group->rank) << " refused a connection from " << p.from
                                   << ": " << why);
    p.fd.reset();
    return true;
  }

  const MeshSetup& s_;
  net::Fd listener_;
  std::vector<net::Fd>& fds_;
  std::list<Pending> pending_;
  int connected_ = 0;
};

InvalidArgumentError refused_congestion(const std::string& name, int err) {
  std::string allowed;
  std::getline(std::ifstream("/proc/sys/net/ipv4/tcp_allowed_congestion_control"), allowed);
  if (allowed.empty()) allowed = "those of net.ipv4.tcp_allowed_congestion_control";
  return InvalidArgumentError("KOLO_TCP_CONGESTION: '" + name + "' is refused by this kernel (" + std::strerror(err) +
                              "): allowed are " + allowed);
}

// A connection between two ranks of one host crosses no link, so there is nothing
// for congestion control to pace. Where the host runs BBR, its pacing on loopback
// settles, launch by launch, at either the full rate or about half of it (BBR's
// estimate of the path's rate is what a collective's bursts leave it with): a
// 1 MiB allreduce between 2 ranks took 230 or 430 us, under cubic 230 every time.
// With more ranks than cores on the host BBR measured faster instead (4 ranks on 2
// cores: 16 MiB in 12 ms against cubic's 17; docs/benchmarks.md, "Congestion
// control"), so there the host's choice stands, as it does between hosts, where
// pacing is what spares a switch a burst from every peer at once. A name set by
// the user applies to every connection and must be accepted.
void choose_congestion_control(const std::vector<net::Fd>& fds, const std::string& setting, int cores) {
  if (!setting.empty()) {
    for (const auto& fd : fds) {
      if (fd.valid() && !net::set_congestion_control(fd.get(), setting)) throw refused_congestion(setting, errno);
    }
    return;
  }
  std::vector<int> local;
  for (const auto& fd : fds) {
    if (fd.valid() && net::peer_is_local(fd.get())) local.push_back(fd.get());
  }
  if (static_cast<int>(local.size()) + 1 > cores) return;
  for (int fd : local) net::set_congestion_control(fd, "cubic");  // best effort: the default works too
}

}  // namespace

std::string congestion_from_env() {
  const std::string name = env::get_string("KOLO_TCP_CONGESTION", "");
  if (name.empty()) return name;
  const net::Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe.valid() && !net::set_congestion_control(probe.get(), name)) throw refused_congestion(name, errno);
  return name;
}

std::vector<net::Fd> connect_mesh(const MeshSetup& s, store::StoreClient& store, const GlooNetwork& network) {
  const GlooGroup& g = *s.group;
  const Deadline deadline = net::deadline_after(s.connect_timeout);
  const ListenAddress address = listen_address(network);
  net::Fd listener;
  try {
    listener = net::listen_tcp(address.host, 0, 128);
  } catch (const net::SocketError& e) {
    throw InvalidArgumentError("cannot use " + address.source + " for kolo's TCP connections: " + e.what());
  }
  const std::string published = publish_form(address.host, net::local_port(listener.get()));
  store.set(address_key(s, g.rank), store::Bytes(published.begin(), published.end()));
  std::vector<net::Fd> fds(static_cast<std::size_t>(g.size));
  for (int peer = 0; peer < g.rank; ++peer)
    if (g.linked(g.rank, peer)) fds[peer] = connect_to(s, store, peer, deadline);
  Acceptor(s, std::move(listener), fds).run(deadline);
  for (int peer = 0; peer < g.size; ++peer) {
    if (!fds[peer].valid()) continue;
    net::set_nonblocking(fds[peer].get());
    net::set_no_delay(fds[peer].get());
  }
  choose_congestion_control(fds, s.congestion_control,
                            s.cores > 0 ? s.cores : static_cast<int>(std::thread::hardware_concurrency()));
  return fds;
}

}  // namespace kolo::comm::tcp
