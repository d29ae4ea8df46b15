// Where a job's parameter servers run (--num-servers, --server-hosts), and the
// hosts of the whole job, ranks' and servers' together. Pure data, made before
// anything starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "plan/host_plan.h"

namespace kolorun {

struct ServerPlacement {
  int server = 0;
  std::string host;
};

// K servers on the --server-hosts list (filled in order, each host up to its
// slots), or without a list on the ranks' hosts in turn (server s on the rank
// hosts' s mod hosts). None without --num-servers. Throws UsageError when K is
// more than the list's slots, or the list is malformed.
std::vector<ServerPlacement> make_server_plan(const HostPlan& ranks, std::optional<int> num_servers,
                                              const std::string& server_hosts);

// The ranks' hosts and, after them, the servers' hosts that hold no rank (as
// entries of no slots): what the store's address and the hosts' addresses are
// chosen for.
HostPlan hosts_of_job(const HostPlan& ranks, const std::vector<ServerPlacement>& servers);

}  // namespace kolorun
