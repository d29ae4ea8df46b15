#include "plan/store_endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <memory>
#include <optional>

#include "launch_error.h"
#include "unique_fd.h"

namespace kolorun {
namespace {

struct InterfaceAddress {
  std::string name;
  std::string address;
  bool up_and_not_loopback = false;
};

std::vector<InterfaceAddress> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw LaunchError(system_error_text("cannot list network interfaces", errno), 1);
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, ::freeifaddrs);
  std::vector<InterfaceAddress> found;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(entry->ifa_addr)->sin_addr, text, sizeof(text));
    bool usable = (entry->ifa_flags & IFF_UP) && !(entry->ifa_flags & IFF_LOOPBACK);
    found.push_back({entry->ifa_name, text, usable});
  }
  return found;
}

// The local address the kernel would send from toward `host`: a UDP socket's
// connect() picks the route without sending anything.
std::optional<std::string> source_address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* result = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &result) != 0 || result == nullptr) return std::nullopt;
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owner(result, ::freeaddrinfo);
  UniqueFd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!probe.valid() || ::connect(probe.get(), result->ai_addr, result->ai_addrlen) != 0) return std::nullopt;
  sockaddr_in local{};
  socklen_t length = sizeof(local);
  if (::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) return std::nullopt;
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text));
  // A name that resolves to loopback here says nothing about the real network.
  if ((ntohl(local.sin_addr.s_addr) >> 24) == 127) return std::nullopt;
  return std::string(text);
}

}  // namespace

std::string interface_ipv4_address(const std::string& name) {
  std::string known;
  for (const auto& entry : ipv4_interfaces()) {
    if (entry.name == name) return entry.address;
    known += (known.empty() ? "" : ", ") + entry.name;
  }
  throw UsageError("--network-interface '" + name + "': no such interface with an IPv4 address here (interfaces: " +
                   (known.empty() ? "none" : known) + ")");
}

StoreEndpoint choose_store_endpoint(const HostPlan& plan, const std::string& network_interface) {
  if (!network_interface.empty())
    return {interface_ipv4_address(network_interface), "the address of --network-interface " + network_interface};
  if (!spans_other_hosts(plan)) return {"127.0.0.1", "every rank is on this host"};
  for (const auto& host : plan.hosts) {
    if (is_this_host(host.host)) continue;
    const std::string name = host_part(host.host);
    if (auto address = source_address_toward(name)) return {*address, "this host's address toward " + name};
    break;  // only the first other host: the rest are assumed to share its network
  }
  for (const auto& entry : ipv4_interfaces()) {
    if (entry.up_and_not_loopback)
      return {entry.address, "the address of " + entry.name + ", the first interface that is up (other host names "
                                                              "do not resolve here)"};
  }
  throw UsageError("cannot tell which address the other hosts can reach this one at: give --network-interface");
}

}  // namespace kolorun
