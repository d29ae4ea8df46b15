// Where each rank runs. The plan is pure data, made before anything starts, so
// that it can be printed (--verbose), checked, and handed to whichever spawner
// starts the processes (fork/exec here, ssh or a launcher command elsewhere).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "options/host_list.h"

namespace kolorun {

struct RankPlacement {
  int rank = 0;
  int local_rank = 0;  // index among the ranks on the same host
  int local_size = 1;
  int cross_rank = 0;  // index among the hosts that have a rank with this local_rank
  int cross_size = 1;
  std::string host;
};

struct HostPlan {
  int size = 0;
  std::vector<HostSlots> hosts;  // only hosts that got ranks, with the ranks they got
  std::vector<RankPlacement> ranks;

  std::string describe() const;
};

// Fills hosts in order, each up to its slots, until num_proc ranks are placed.
// num_proc absent: every slot gets a rank. Throws UsageError when num_proc exceeds
// the slots.
HostPlan make_host_plan(const std::vector<HostSlots>& hosts, std::optional<int> num_proc);

// True when some rank runs on a host other than this one.
bool spans_other_hosts(const HostPlan& plan);

}  // namespace kolorun
