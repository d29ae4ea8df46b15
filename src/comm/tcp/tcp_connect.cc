#include "comm/tcp/tcp_connect.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "comm/tcp/tcp_accept.h"
#include "common/settings.h"
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

// The listening rank closed the connection or went silent before the handshake
// was done: it closes connections beyond its limits, and slow ones
// (tcp_accept.h), which a new attempt gets past once the strangers are gone.
struct HandshakeCut {
  std::string what;
};

// One attempt at connecting to lower rank `peer` and proving this rank.
net::Fd handshake_with(const MeshSetup& s, int peer, const std::string& host, int port, Deadline deadline) {
  const MeshGroup& g = *s.group;
  const int me = g.rank;
  const std::string where = g.member_name(peer) + " at " + host + ":" + std::to_string(port);
  net::Fd fd;
  try {
    fd = net::connect_tcp_retrying(host, port, deadline);
  } catch (const net::SocketError& e) {
    throw PeerFailureError(g.job_rank(peer), "tcp: connecting to " + where + " failed: " + e.what());
  }
  const Deadline handshake = std::min(deadline, net::deadline_after(s.handshake_timeout));
  std::array<std::uint8_t, kChallengeBytes> challenge;
  Nonce mine;
  Mac welcome;
  try {
    net::read_exact(fd.get(), challenge.data(), challenge.size(), handshake);
    const auto hello = hello_message(s.keys, challenge, me, peer, &mine);
    net::write_all(fd.get(), hello.data(), hello.size(), handshake);
    net::read_exact(fd.get(), welcome.data(), welcome.size(), handshake);
  } catch (const net::SocketError& e) {
    throw HandshakeCut{e.what()};
  } catch (const InvalidArgumentError& e) {
    throw PeerFailureError(g.job_rank(peer), "tcp: " + where + " refused or failed the handshake: " + e.what());
  }
  Nonce theirs;
  std::memcpy(theirs.data(), challenge.data() + 8, theirs.size());
  if (!check_welcome(s.keys, welcome, theirs, mine, me, peer))
    throw PeerFailureError(g.job_rank(peer),
                           "tcp: " + where + " refused or failed the handshake: it did not prove the job's secret");
  return fd;
}

// Connects to lower rank `peer` and proves this rank, trying again, a little later
// each time, while the handshake is cut: strangers flooding the peer's port must
// not make this rank blame it.
net::Fd connect_to(const MeshSetup& s, store::StoreClient& store, int peer, Deadline deadline) {
  const std::string who = s.group->member_name(peer);
  store::Bytes value;
  try {
    value = store.get(address_key(s, peer), std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  } catch (const TimeoutError&) {
    throw TimeoutError("tcp: " + who + " did not publish its address within " +
                       std::to_string(s.connect_timeout.count()) + " ms (KOLO_START_TIMEOUT)");
  }
  const auto [host, port] = split_address(std::string(value.begin(), value.end()));
  std::chrono::milliseconds pause{20};
  for (int attempt = 1;; ++attempt) {
    try {
      return handshake_with(s, peer, host, port, deadline);
    } catch (const HandshakeCut& cut) {
      if (Clock::now() + pause >= deadline)
        throw TimeoutError("tcp: the handshake with " + who + " at " + host + ":" + std::to_string(port) + " was cut " +
                           std::to_string(attempt) + " time(s) within " + std::to_string(s.connect_timeout.count()) +
                           " ms (KOLO_START_TIMEOUT), the last: " + cut.what +
                           " (a rank closes connections beyond its limits: is something flooding its port?)");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
}

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
  if (host_ranks_outnumber_cores(fds, cores)) return;
  for (const auto& fd : fds) {
    // Best effort: the default works too.
    if (fd.valid() && net::peer_is_local(fd.get())) net::set_congestion_control(fd.get(), "cubic");
  }
}

}  // namespace

// Checked by init() with a socket of its own: a name this kernel refuses fails there.
KOLO_SETTING(kCongestion, {.name = "KOLO_TCP_CONGESTION", .kind = settings::Kind::Text, .fallback = "the host's own",
                           .check = [] { congestion_from_env(); },
                           .doc = "tcp: the kernel's congestion control for every connection"});

std::string congestion_from_env() {
  const std::string name = kCongestion.text();
  if (name.empty()) return name;
  const net::Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (probe.valid() && !net::set_congestion_control(probe.get(), name)) throw refused_congestion(name, errno);
  return name;
}

std::vector<net::Fd> connect_mesh(const MeshSetup& s, store::StoreClient& store, const MeshNetwork& network) {
  const MeshGroup& g = *s.group;
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
  accept_peers(s, std::move(listener), fds, deadline);
  for (int peer = 0; peer < g.size; ++peer) {
    if (!fds[peer].valid()) continue;
    net::set_nonblocking(fds[peer].get());
    net::set_no_delay(fds[peer].get());
  }
  choose_congestion_control(fds, s.congestion_control, s.cores);
  return fds;
}

bool host_ranks_outnumber_cores(const std::vector<net::Fd>& fds, int cores) {
  if (cores <= 0) cores = static_cast<int>(std::thread::hardware_concurrency());
  int here = 1;
  for (const auto& fd : fds) {
    if (fd.valid() && net::peer_is_local(fd.get())) ++here;
  }
  return here > cores;
}

}  // namespace kolo::comm::tcp
