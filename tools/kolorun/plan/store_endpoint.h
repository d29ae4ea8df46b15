// Where the job's rendezvous store listens, and the address the ranks are told
// (KOLO_STORE_ADDR). A job on this host only uses loopback. A job with ranks on
// other hosts needs an address they can reach:
//  - --network-interface NAME: that interface's IPv4 address, else its IPv6 one;
//  - else the source address of this host's route toward the first other host
//    (when its name resolves here; IPv4 where it resolves to both);
//  - else the address of the first interface that is up and not loopback (IPv4
//    before IPv6).
// IPv6 link-local addresses never serve: they need an interface beside them.
#pragma once

#include <string>

#include "plan/host_plan.h"

namespace kolorun {

struct StoreEndpoint {
  std::string address;  // listened on, and advertised to the ranks
  std::string reason;   // how it was chosen, for --verbose
};

StoreEndpoint choose_store_endpoint(const HostPlan& plan, const std::string& network_interface);

// The IPv4 address of interface `name`, else its IPv6 one. Throws UsageError
// (listing the interfaces that have one) when it has neither.
std::string interface_address(const std::string& name);

}  // namespace kolorun
