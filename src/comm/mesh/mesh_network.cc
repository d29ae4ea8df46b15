#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include "comm/mesh/mesh_communicator.h"
#include "kolo/error.h"
#include "net/host_name.h"
#include "net/socket.h"

namespace kolo::comm {
namespace {

// True when `host` resolves to a loopback address only: peers on other hosts
// could never connect to it.
bool resolves_to_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &result) != 0) return false;
  bool loopback = true;
  for (addrinfo* ai = result; ai != nullptr; ai = ai->ai_next) {
    const bool ip = ai->ai_family == AF_INET || ai->ai_family == AF_INET6;
    if (ip && !net::is_loopback(*ai->ai_addr)) loopback = false;
  }
  freeaddrinfo(result);
  return loopback;
}

// The interface's first IPv4 address, else its first IPv6 one that is not
// link-local (which needs a scope the peers would not know); empty if none.
std::string interface_address(const std::string& iface) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string v4, v6;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || iface != a->ifa_name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      const in6_addr& address = reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&address)) continue;
      inet_ntop(AF_INET6, &address, text, sizeof text);
      v6 = text;
    }
  }
  freeifaddrs(list);
  return v4.empty() ? v6 : v4;
}

}  // namespace

KOLO_SETTING(kHostAddr, {.name = "KOLO_HOST_ADDR", .kind = settings::Kind::Text,
                         .fallback = "set by kolorun across hosts",
                         .doc = "the address this rank's TCP connections use"});
KOLO_SETTING(kIface, {.name = "KOLO_IFACE", .kind = settings::Kind::Text, .fallback = "set by kolorun across hosts",
                      .doc = "the network interface whose address this rank's TCP connections use"});

MeshNetwork MeshNetwork::from_env(bool all_local) {
  MeshNetwork network;
  network.host_addr = kHostAddr.text();
  network.iface = kIface.text();
  network.all_local = all_local;
  return network;
}

ListenAddress listen_address(const MeshNetwork& network) {
  if (!network.host_addr.empty()) return {network.host_addr, "KOLO_HOST_ADDR=" + network.host_addr};
  if (!network.iface.empty()) {
    ListenAddress a{interface_address(network.iface), "KOLO_IFACE=" + network.iface};
    if (a.host.empty())
      throw InvalidArgumentError("cannot use " + a.source +
                                 " for kolo's TCP connections: no such interface, or it has no address");
    return a;
  }
  if (network.all_local) return {"127.0.0.1", "loopback"};
  ListenAddress a{net::host_name(), ""};
  a.source = "this host's name '" + a.host + "'";
  if (resolves_to_loopback(a.host))
    throw InvalidArgumentError("the job spans several hosts but " + a.source +
                               " resolves to a loopback address that other hosts cannot reach; set "
                               "KOLO_IFACE to the network interface to use, or KOLO_HOST_ADDR to this host's address");
  return a;
}

int MeshGroup::job_rank(int group_rank) const {
  if (group_rank >= 0 && group_rank < servers) return -1;
  if (group_rank < 0 || job_ranks.empty() || group_rank >= static_cast<int>(job_ranks.size())) return group_rank;
  return job_ranks[group_rank];
}

std::string MeshGroup::member_name(int group_rank) const {
  if (group_rank >= 0 && group_rank < servers) return "server " + std::to_string(group_rank);
  return "rank " + std::to_string(job_rank(group_rank));
}

}  // namespace kolo::comm
