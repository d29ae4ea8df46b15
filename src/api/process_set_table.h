// The process sets of a kolo session: for each, its members and, on a member,
// the engine that negotiates and runs the set's operations.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/rank_list.h"
#include "engine/engine.h"

namespace kolo {

class ProcessSetTable {
 public:
  struct Set {
    std::vector<int> ranks;                  // job ranks, ascending
    std::shared_ptr<engine::Engine> engine;  // null on a rank outside the set
  };

  // The id the next add() gets: ids agree across ranks because every rank adds
  // its sets in the same order.
  int next_id() const;
  // Ids from `first` on (an elastic job's generation picks them, so that a set
  // of an earlier generation is never taken for a new one); an id below it
  // names a set of an earlier session.
  void start_ids_at(int first);
  void add(int id, Set set);
  // Takes the set out of the table (its engine is the caller's to shut down);
  // InvalidArgumentError when there is no such set.
  Set remove(int id);
  // A copy of set `id` (its engine null on a rank outside it);
  // InvalidArgumentError when there is no such set.
  Set get(int id) const;
  // The engine of set `id` on this rank; InvalidArgumentError naming the set when
  // it does not exist or this rank (`job_rank`) is not a member.
  std::shared_ptr<engine::Engine> engine(int id, int job_rank) const;
  // InvalidArgumentError when there is no such set.
  std::vector<int> ranks(int id) const;
  // The id of a set with exactly these ranks, or 0.
  int find(const std::vector<int>& ranks) const;
  // Takes every set out (at shutdown).
  std::vector<Set> take_all();

 private:
  const Set& checked(int id) const;

  mutable std::mutex mutex_;
  std::map<int, Set> sets_;
  int next_id_ = 1;
  int first_id_ = 1;
};

}  // namespace kolo
