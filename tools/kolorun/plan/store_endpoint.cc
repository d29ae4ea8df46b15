#include "plan/store_endpoint.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <optional>

#include "launch_error.h"
#include "plan/ip_address.h"
#include "unique_fd.h"

namespace kolorun {
namespace {

struct InterfaceAddress {
  std::string name;
  std::string address;
  bool up_and_not_loopback = false;
};

// Every interface's usable addresses, IPv4 ones first.
std::vector<InterfaceAddress> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw LaunchError(system_error_text("cannot list network interfaces", errno), 1);
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> owner(list, ::freeifaddrs);
  std::vector<InterfaceAddress> found;
  for (const int family : {AF_INET, AF_INET6}) {
    for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
      if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != family) continue;
      std::optional<std::string> text = usable_address_text(*entry->ifa_addr);
      if (!text) continue;
      const bool loopback = (entry->ifa_flags & IFF_LOOPBACK) || is_loopback_address(*entry->ifa_addr);
      found.push_back({entry->ifa_name, *text, (entry->ifa_flags & IFF_UP) && !loopback});
    }
  }
  return found;
}

// The local address the kernel would send from toward `host`: a UDP socket's
// connect() picks the route without sending anything. IPv4 first where the name
// has both.
std::optional<std::string> source_address_toward(const std::string& host) {
  for (const int family : {AF_INET, AF_INET6}) {
    const ResolvedAddresses result = resolve(host, family, SOCK_DGRAM, "9");
    if (!result) continue;
    UniqueFd probe(::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!probe.valid() || ::connect(probe.get(), result->ai_addr, result->ai_addrlen) != 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    if (::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0) continue;
    // A name that resolves to loopback here says nothing about the real network.
    const auto& source = reinterpret_cast<const sockaddr&>(local);
    if (is_loopback_address(source)) continue;
    if (auto text = usable_address_text(source)) return text;
  }
  return std::nullopt;
}

}  // namespace

std::string interface_address(const std::string& name) {
  std::vector<std::string> known;
  for (const auto& entry : interface_addresses()) {
    if (entry.name == name) return entry.address;
    if (std::find(known.begin(), known.end(), entry.name) == known.end()) known.push_back(entry.name);
  }
  std::string listing;
  for (const auto& interface : known) listing += (listing.empty() ? "" : ", ") + interface;
  throw UsageError("--network-interface '" + name +
                   "': no such interface with an IPv4 or IPv6 address here (interfaces: " +
                   (listing.empty() ? "none" : listing) + ")");
}

StoreEndpoint choose_store_endpoint(const HostPlan& plan, const std::string& network_interface) {
  if (!network_interface.empty())
    return {interface_address(network_interface), "the address of --network-interface " + network_interface};
  if (!spans_other_hosts(plan)) return {"127.0.0.1", "every rank is on this host"};
  for (const auto& host : plan.hosts) {
    if (is_this_host(host.host)) continue;
    const std::string name = without_brackets(host_part(host.host));
    if (auto address = source_address_toward(name)) return {*address, "this host's address toward " + name};
    break;  // only the first other host: the rest are assumed to share its network
  }
  for (const auto& entry : interface_addresses()) {
    if (entry.up_and_not_loopback)
      return {entry.address, "the address of " + entry.name + ", the first interface that is up (other host names "
                                                              "do not resolve here)"};
  }
  throw UsageError("cannot tell which address the other hosts can reach this one at: give --network-interface");
}

}  // namespace kolorun
