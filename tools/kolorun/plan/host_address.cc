#include "plan/host_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>

#include "comm/mesh/mesh_communicator.h"
#include "launch_error.h"
#include "plan/ip_address.h"

namespace kolorun {
namespace {

// The first address `name` resolves to here (IPv4 before IPv6) that is not
// loopback: a name that resolves to loopback here (Debian's 127.0.1.1 for the own
// host name) says nothing about the address other hosts reach.
std::optional<std::string> resolved_address(const std::string& name) {
  for (const int family : {AF_INET, AF_INET6}) {
    const ResolvedAddresses result = resolve(name, family, SOCK_STREAM);
    if (!result || is_loopback_address(*result->ai_addr)) continue;
    if (auto text = usable_address_text(*result->ai_addr)) return text;
  }
  return std::nullopt;
}

// Whether kolorun passes KOLO_HOST_ADDR at all.
bool passes_host_addresses(const HostPlan& plan, const std::string& network_interface) {
  const char* user_value = std::getenv(kolo::comm::kHostAddr.name);
  return spans_other_hosts(plan) && network_interface.empty() && user_value == nullptr;
}

// The address for `host`'s ranks, or nullopt when kolorun knows none.
std::optional<std::string> reachable_host_address(const std::string& host, const std::string& store_address) {
  if (is_this_host(host)) return store_address;
  const std::string name = without_brackets(host_part(host));
  // The user named the address; it is taken as given, loopback included.
  if (is_ip_literal(name)) return name;
  return resolved_address(name);
}

}  // namespace

std::map<std::string, std::string> host_addresses(const HostPlan& plan, const std::string& store_address,
                                                  const std::string& network_interface) {
  std::map<std::string, std::string> addresses;
  if (!passes_host_addresses(plan, network_interface)) return addresses;
  for (const auto& host : plan.hosts) {
    if (auto address = reachable_host_address(host.host, store_address)) addresses[host.host] = *address;
  }
  return addresses;
}

std::string format_host_addresses(const std::map<std::string, std::string>& addresses) {
  std::string text;
  for (const auto& [host, address] : addresses) text += (text.empty() ? "" : ",") + host + "=" + address;
  return text;
}

std::map<std::string, std::string> parse_host_addresses(const std::string& text) {
  std::map<std::string, std::string> addresses;
  std::istringstream entries(text);
  for (std::string entry; std::getline(entries, entry, ',');) {
    auto eq = entry.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size())
      throw LaunchError("'" + text + "' is not a list of host=address entries", 1);
    addresses[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return addresses;
}

}  // namespace kolorun
