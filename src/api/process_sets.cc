// add_process_set() and remove_process_set(): every rank agrees on the set over
// the global set first, then the members build its communicator and engine.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>

#include "api/runtime.h"
#include "common/logging.h"
#include "kolo/collectives.h"
#include "kolo/error.h"
#include "kolo/process_set.h"

namespace kolo {
namespace {

// Every rank's list, as it gave it, and its host (the topology's cross rank): a
// gather first, so that every rank judges the same lists and fails (or not)
// alike, and knows which members share a host.
struct GatheredLists {
  std::vector<std::vector<int>> lists;
  std::vector<int> hosts;
};

GatheredLists gather_lists(const std::vector<int>& mine, int host, int id) {
  std::vector<std::int64_t> block{host, static_cast<std::int64_t>(mine.size())};
  block.insert(block.end(), mine.begin(), mine.end());
  Buffer all = allgather(Tensor{block.data(), DataType::Int64, {static_cast<std::int64_t>(block.size())}},
                         {.name = "kolo.add_process_set." + std::to_string(id)});
  GatheredLists gathered;
  const auto* values = all.as<std::int64_t>();
  const std::int64_t count = all.shape()[0];
  for (std::int64_t at = 0; at < count;) {
    gathered.hosts.push_back(static_cast<int>(values[at++]));
    const std::int64_t n = values[at++];
    gathered.lists.emplace_back(values + at, values + at + n);
    at += n;
  }
  return gathered;
}

std::vector<int> checked_members(const std::vector<std::vector<int>>& lists, int job_size) {
  for (std::size_t r = 1; r < lists.size(); ++r) {
    if (lists[r] != lists[0])
      throw MismatchError("add_process_set: ranks disagree on the set: rank 0 gave " + describe_ranks(lists[0]) +
                          ", rank " + std::to_string(r) + " gave " + describe_ranks(lists[r]));
  }
  std::vector<int> ranks = lists[0];
  std::sort(ranks.begin(), ranks.end());
  if (ranks.empty()) throw InvalidArgumentError("add_process_set: a process set needs at least one rank");
  if (auto twice = std::adjacent_find(ranks.begin(), ranks.end()); twice != ranks.end())
    throw InvalidArgumentError("add_process_set: rank " + std::to_string(*twice) + " appears twice in " +
                               describe_ranks(lists[0]));
  if (ranks.front() < 0 || ranks.back() >= job_size)
    throw InvalidArgumentError("add_process_set: " + describe_ranks(lists[0]) + " names a rank outside 0.." +
                               std::to_string(job_size - 1));
  return ranks;
}

}  // namespace

ProcessSet add_process_set(std::vector<int> ranks) {
  runtime::SessionView session = runtime::session();
  const int id = session.sets->next_id();
  const GatheredLists gathered = gather_lists(ranks, session.job->topology().cross_rank, id);
  std::vector<int> members = checked_members(gathered.lists, session.job->topology().size);
  if (int existing = session.sets->find(members))
    throw InvalidArgumentError("add_process_set: " + describe_ranks(members) + " already is process set " +
                               std::to_string(existing));
  ProcessSetTable::Set set{members, nullptr};
  if (std::binary_search(members.begin(), members.end(), session.job->topology().rank)) {
    engine::EngineConfig config = *session.config;
    config.timeline_path.clear();  // the timeline records the global set
    if (!config.flight_recorder_dir.empty()) config.flight_recorder_dir += "/set" + std::to_string(id);
    std::vector<int> hosts;
    for (int member : members) hosts.push_back(gathered.hosts[static_cast<std::size_t>(member)]);
    set.engine = std::make_shared<engine::Engine>(session.job->set_communicator(id, members, hosts), config);
    if (session.job->topology().rank == members.front())
      KOLO_LOG(Info, "process set " << id << ": communicator " << set.engine->backend() << " (" << members.size()
                                    << " ranks on " << std::set<int>(hosts.begin(), hosts.end()).size()
                                    << " host(s))");
  }
  session.sets->add(id, std::move(set));
  return ProcessSet{id};
}

void remove_process_set(const ProcessSet& set) {
  if (set.id == 0) throw InvalidArgumentError("remove_process_set: the global process set cannot be removed");
  runtime::SessionView session = runtime::session();
  // An error for an unknown set, before any rank waits for the others.
  const std::shared_ptr<engine::Engine> engine = session.sets->get(set.id).engine;
  const std::string why =
      "process set " + std::to_string(set.id) + " was removed (remove_process_set) while the operation was pending";
  // A member past the barrier may end its engine before this rank is out of it;
  // this rank's engine then sees the peers end and fails what is pending with
  // this reason, named before the barrier.
  if (engine) engine->expect_shutdown(why);
  // Every rank gets here before a member ends the set's engine, so that no member
  // still has the set's operations to finish.
  try {
    barrier({.name = "kolo.remove_process_set." + std::to_string(set.id)});
  } catch (...) {
    if (engine) engine->expect_shutdown("");
    throw;
  }
  ProcessSetTable::Set removed = session.sets->remove(set.id);
  if (removed.engine) removed.engine->shutdown(why);
}

std::vector<int> process_set_ranks(const ProcessSet& set) {
  runtime::SessionView session = runtime::session();
  if (set.id != 0) return session.sets->ranks(set.id);
  std::vector<int> all(static_cast<std::size_t>(session.job->topology().size));
  for (int r = 0; r < session.job->topology().size; ++r) all[static_cast<std::size_t>(r)] = r;
  return all;
}

int process_set_rank(const ProcessSet& set) {
  const std::vector<int> ranks = process_set_ranks(set);
  const int me = runtime::session().job->topology().rank;
  auto it = std::find(ranks.begin(), ranks.end(), me);
  return it == ranks.end() ? -1 : static_cast<int>(it - ranks.begin());
}

int process_set_size(const ProcessSet& set) { return static_cast<int>(process_set_ranks(set).size()); }

}  // namespace kolo
