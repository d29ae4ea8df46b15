// The address kolorun tells each host's ranks to use for their own TCP
// connections (KOLO_HOST_ADDR: gloo binds to it and publishes it to the peers).
// Without it a rank falls back on its host name, which Debian resolves to a
// loopback address the other hosts cannot reach, or needs KOLO_IFACE.
//
// kolorun passes it only for a job that spans hosts, when no --network-interface
// was given (ranks then get KOLO_IFACE) and the user did not set KOLO_HOST_ADDR
// (which then travels unchanged). For a host, the address is:
//  - this host: the store's address, which every other host must reach anyway;
//  - a host given as an IPv4 or IPv6 address (after ssh's user@, an IPv6 one
//    with or without brackets): that address;
//  - a host name that resolves here to an address that is not loopback (IPv4
//    where it has both; IPv6 link-local never): that address;
//  - otherwise none, and the rank falls back as above.
#pragma once

#include <map>
#include <string>

#include "plan/host_plan.h"

namespace kolorun {

// Host -> address for every host of `plan` that has one (see above); empty when
// kolorun passes none.
std::map<std::string, std::string> host_addresses(const HostPlan& plan, const std::string& store_address,
                                                  const std::string& network_interface);

// "host=address,host=address", how --mpi hands the addresses to its ranks (host
// names hold neither '=' nor ','); parse throws LaunchError on other text.
std::string format_host_addresses(const std::map<std::string, std::string>& addresses);
std::map<std::string, std::string> parse_host_addresses(const std::string& text);

}  // namespace kolorun
