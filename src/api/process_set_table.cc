#include "api/process_set_table.h"

#include <algorithm>
#include <string>

#include "kolo/error.h"

namespace kolo {

int ProcessSetTable::next_id() const {
  std::lock_guard lock(mutex_);
  return next_id_;
}

void ProcessSetTable::add(int id, Set set) {
  std::lock_guard lock(mutex_);
  sets_.emplace(id, std::move(set));
  next_id_ = std::max(next_id_, id + 1);
}

void ProcessSetTable::start_ids_at(int first) {
  std::lock_guard lock(mutex_);
  first_id_ = next_id_ = first;
}

const ProcessSetTable::Set& ProcessSetTable::checked(int id) const {
  auto it = sets_.find(id);
  if (it == sets_.end() && id > 0 && id < first_id_)
    throw InvalidArgumentError("process set " + std::to_string(id) +
                               " belongs to an earlier generation of this elastic job: a reset re-forms the job "
                               "without its process sets; add it again with add_process_set (on every rank)");
  if (it == sets_.end())
    throw InvalidArgumentError("process set " + std::to_string(id) +
                               " does not exist (add it with add_process_set, on every rank)");
  return it->second;
}

ProcessSetTable::Set ProcessSetTable::remove(int id) {
  std::lock_guard lock(mutex_);
  checked(id);
  auto node = sets_.extract(id);
  return std::move(node.mapped());
}

std::shared_ptr<engine::Engine> ProcessSetTable::engine(int id, int job_rank) const {
  std::lock_guard lock(mutex_);
  const Set& set = checked(id);
  if (!set.engine)
    throw InvalidArgumentError("rank " + std::to_string(job_rank) + " is not in process set " + std::to_string(id) +
                               " (ranks " + describe_ranks(set.ranks) + ")");
  return set.engine;
}

ProcessSetTable::Set ProcessSetTable::get(int id) const {
  std::lock_guard lock(mutex_);
  return checked(id);
}

std::vector<int> ProcessSetTable::ranks(int id) const { return get(id).ranks; }

int ProcessSetTable::find(const std::vector<int>& ranks) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, set] : sets_)
    if (set.ranks == ranks) return id;
  return 0;
}

std::vector<ProcessSetTable::Set> ProcessSetTable::take_all() {
  std::lock_guard lock(mutex_);
  std::vector<Set> all;
  for (auto& [id, set] : sets_) all.push_back(std::move(set));
  sets_.clear();
  return all;
}

}  // namespace kolo
