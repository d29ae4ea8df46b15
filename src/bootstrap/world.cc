#include "bootstrap/world.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <set>

#include "common/fnv.h"
#include "kolo/error.h"

namespace kolo::bootstrap {

bool is_whole_job(const std::vector<int>& ranks, int size) {
  if (static_cast<int>(ranks.size()) != size) return false;
  for (int r = 0; r < size; ++r) {
    if (ranks[static_cast<std::size_t>(r)] != r) return false;
  }
  return true;
}

void check_world_ranks(const Topology& job, const std::vector<int>& ranks) {
  const std::string what = "kolo::init: the ranks " + describe_ranks(ranks);
  if (ranks.empty()) throw InvalidArgumentError("kolo::init: the list of ranks is empty");
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= job.size)
      throw InvalidArgumentError(what + " include " + std::to_string(r) + ", which is not a rank of this job of " +
                                 std::to_string(job.size));
    if (!seen.insert(r).second) throw InvalidArgumentError(what + " list rank " + std::to_string(r) + " twice");
  }
  if (!seen.count(job.rank))
    throw InvalidArgumentError(what + " do not include this process, rank " + std::to_string(job.rank) +
                               " of the job: each process joins a world it belongs to");
}

std::string world_name(const std::vector<int>& ranks) {
  Fnv1a hash;
  for (int r : ranks) hash.add(static_cast<std::uint32_t>(r), 4);
  char name[20];
  std::snprintf(name, sizeof name, "w%016llx", static_cast<unsigned long long>(hash.value()));
  return name;
}

Topology world_topology(const Topology& job, const std::vector<int>& ranks, const std::vector<int>& hosts) {
  Topology t;
  t.launcher = job.launcher;
  t.store_addr = job.store_addr;
  t.secret = job.secret;
  t.job_id = job.job_id.empty() ? world_name(ranks) : job.job_id + "-" + world_name(ranks);
  t.job_ranks = ranks;
  t.size = static_cast<int>(ranks.size());
  t.rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), job.rank) - ranks.begin());
  place_on_hosts(t, hosts);
  return t;
}

void place_on_hosts(Topology& t, const std::vector<int>& hosts) {
  std::vector<int> host_order;  // host indices, as the list first meets them
  for (int h : hosts) {
    if (std::find(host_order.begin(), host_order.end(), h) == host_order.end()) host_order.push_back(h);
  }
  const int my_host = hosts[static_cast<std::size_t>(t.rank)];
  t.cross_size = static_cast<int>(host_order.size());
  t.cross_rank = static_cast<int>(std::find(host_order.begin(), host_order.end(), my_host) - host_order.begin());
  t.local_rank = static_cast<int>(std::count(hosts.begin(), hosts.begin() + t.rank, my_host));
  t.local_size = static_cast<int>(std::count(hosts.begin(), hosts.end(), my_host));
  t.hosts_alike = std::all_of(host_order.begin(), host_order.end(), [&](int h) {
    return std::count(hosts.begin(), hosts.end(), h) == t.local_size;
  });
}

std::string job_id_of(const Topology& t) {
  if (t.whole_job()) return t.job_id;
  const std::string name = world_name(t.job_ranks);
  return t.job_id.size() > name.size() ? t.job_id.substr(0, t.job_id.size() - name.size() - 1) : "";
}

}  // namespace kolo::bootstrap
