#include "plan/server_plan.h"

#include <algorithm>

#include "launch_error.h"

namespace kolorun {

std::vector<ServerPlacement> make_server_plan(const HostPlan& ranks, std::optional<int> num_servers,
                                              const std::string& server_hosts) {
  std::vector<ServerPlacement> servers;
  if (!num_servers) return servers;
  const int count = *num_servers;
  if (server_hosts.empty()) {
    for (int s = 0; s < count; ++s) servers.push_back({s, ranks.hosts[s % ranks.hosts.size()].host});
    return servers;
  }
  const std::vector<HostSlots> hosts = parse_host_list(server_hosts, "--server-hosts");
  for (const auto& host : hosts)
    for (int slot = 0; slot < host.slots && static_cast<int>(servers.size()) < count; ++slot)
      servers.push_back({static_cast<int>(servers.size()), host.host});
  if (static_cast<int>(servers.size()) < count)
    throw UsageError("--num-servers " + std::to_string(count) + " is more than the " +
                     std::to_string(servers.size()) + " slots given by --server-hosts");
  return servers;
}

HostPlan hosts_of_job(const HostPlan& ranks, const std::vector<ServerPlacement>& servers) {
  HostPlan job = ranks;
  for (const auto& s : servers) {
    const bool known = std::any_of(job.hosts.begin(), job.hosts.end(), [&](const HostSlots& h) { return h.host == s.host; });
    if (!known) job.hosts.push_back({s.host, 0});
  }
  return job;
}

}  // namespace kolorun
