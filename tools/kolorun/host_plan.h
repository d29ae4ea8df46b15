// Where each rank runs. The plan is pure data, made before anything starts, so
// that it can be printed (--verbose), checked, and handed to whichever spawner
// starts the processes (local fork/exec now, ssh for other hosts later).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kolorun {

struct HostSlots {
  std::string host;  // as the user wrote it, or this machine's hostname
  int slots = 1;
};

// Parses "host:slots,host:slots" (slots default to 1). Entries naming the same
// host are merged; every alias of this machine (localhost, 127.0.0.1, its hostname)
// counts as one host named by its hostname. Throws UsageError.
std::vector<HostSlots> parse_host_list(const std::string& text);

// True for localhost, 127.0.0.1 and this machine's hostname.
bool is_this_host(const std::string& host);
std::string this_hostname();

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

// This kolorun starts processes on this host only: throws UsageError naming the
// first other host in the list, whether or not it would get a rank.
void require_single_host(const std::vector<HostSlots>& hosts);

}  // namespace kolorun
