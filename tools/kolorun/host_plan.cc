#include "host_plan.h"

#include <unistd.h>

#include <charconv>
#include <climits>
#include <sstream>

#include "launch_error.h"

namespace kolorun {
namespace {

int parse_slots(const std::string& entry, const std::string& text) {
  int slots = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, slots);
  if (text.empty() || ec != std::errc() || ptr != end || slots <= 0)
    throw UsageError("-H entry '" + entry + "' needs a positive slot count after ':'");
  return slots;
}

HostSlots parse_entry(const std::string& entry) {
  HostSlots parsed;
  auto colon = entry.rfind(':');
  parsed.host = entry.substr(0, colon);
  if (colon != std::string::npos) parsed.slots = parse_slots(entry, entry.substr(colon + 1));
  if (parsed.host.empty()) throw UsageError("-H entry '" + entry + "' has no host name");
  if (is_this_host(parsed.host)) parsed.host = this_hostname();
  return parsed;
}

}  // namespace

std::string this_hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

bool is_this_host(const std::string& host) {
  return host == "localhost" || host == "127.0.0.1" || host == this_hostname();
}

std::vector<HostSlots> parse_host_list(const std::string& text) {
  std::vector<HostSlots> hosts;
  std::stringstream stream(text);
  std::string entry;
  while (std::getline(stream, entry, ',')) {
    if (entry.empty()) throw UsageError("-H '" + text + "' has an empty entry");
    HostSlots parsed = parse_entry(entry);
    bool merged = false;
    for (auto& known : hosts) {
      if (known.host != parsed.host) continue;
      if (known.slots > INT_MAX - parsed.slots) throw UsageError("-H '" + text + "' has too many slots");
      known.slots += parsed.slots;
      merged = true;
    }
    if (!merged) hosts.push_back(parsed);
  }
  if (hosts.empty() || text.back() == ',') throw UsageError("-H '" + text + "' has an empty entry");
  return hosts;
}

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
                     " slots given by -H");
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

void require_single_host(const std::vector<HostSlots>& hosts) {
  for (const auto& host : hosts) {
    if (!is_this_host(host.host)) {
      throw UsageError("host '" + host.host +
                       "' is not this machine: multi-host launch is not supported yet (use localhost:N, "
                       "127.0.0.1:N or " +
                       this_hostname() + ":N)");
    }
  }
}

}  // namespace kolorun
