#include "plan/host_plan.h"

#include <algorithm>
#include <climits>
#include <sstream>

#include "launch_error.h"

namespace kolorun {

std::string HostPlan::describe() const {
  std::ostringstream out;
  out << size << (size == 1 ? " rank" : " ranks") << " on " << hosts.size() << (hosts.size() == 1 ? " host" : " hosts");
  for (const auto& r : ranks) {
    out << "\n  rank " << r.rank << " on " << r.host << ": local rank " << r.local_rank << "/" << r.local_size
        << ", cross rank " << r.cross_rank << "/" << r.cross_size;
  }
  return out.str();
}

HostPlan make_host_plan(const std::vector<HostSlots>& hosts, std::optional<int> num_proc) {
  long long total_slots = 0;
  for (const auto& host : hosts) total_slots += host.slots;
  int size = num_proc.value_or(static_cast<int>(std::min<long long>(total_slots, INT_MAX)));
  if (size > total_slots) {
    throw UsageError("-np " + std::to_string(size) + " is more than the " + std::to_string(total_slots) +
                     " slots given by the host list");
  }

  HostPlan plan;
  plan.size = size;
  for (const auto& host : hosts) {
    int remaining = size - static_cast<int>(plan.ranks.size());
    if (remaining <= 0) break;
    HostSlots used{host.host, std::min(host.slots, remaining)};
    for (int local = 0; local < used.slots; ++local) {
      RankPlacement placement;
      placement.rank = static_cast<int>(plan.ranks.size());
      placement.local_rank = local;
      placement.local_size = used.slots;
      placement.host = used.host;
      plan.ranks.push_back(placement);
    }
    plan.hosts.push_back(used);
  }

  // Cross ranks, as Horovod defines them: rank i of the cross communicator made of
  // the ranks that share a local rank, one per host.
  for (auto& rank : plan.ranks) {
    int index = 0, count = 0;
    for (std::size_t h = 0; h < plan.hosts.size(); ++h) {
      if (plan.hosts[h].slots <= rank.local_rank) continue;
      if (plan.hosts[h].host == rank.host) index = count;
      ++count;
    }
    rank.cross_rank = index;
    rank.cross_size = count;
  }
  return plan;
}

bool spans_other_hosts(const HostPlan& plan) {
  for (const auto& host : plan.hosts)
    if (!is_this_host(host.host)) return true;
  return false;
}

}  // namespace kolorun
