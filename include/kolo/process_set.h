// Process sets: groups of ranks that run collectives among themselves.
//
// Every collective takes a ProcessSet in its options; the default is the global
// set, every rank of the job. A set of some of the ranks negotiates and runs its
// operations on its own engine and communicator, so disjoint sets run their
// collectives concurrently. A broadcast's root is a job rank (it must be a
// member); an allgather's rows come in the order of the set's ranks.
#pragma once

#include <vector>

namespace kolo {

// A handle naming a set; cheap to copy. The default is the global set.
struct ProcessSet {
  int id = 0;

  bool operator==(const ProcessSet&) const = default;
};

inline constexpr ProcessSet global_process_set{};

// Adds a set of the given job ranks (in any order; duplicates are an error).
// Collective: every rank of the job calls it, with the same ranks, in the same
// order as its other add_process_set() calls; ranks outside the set only learn
// its id. Throws MismatchError on every rank when the ranks disagree, and
// InvalidArgumentError for a bad rank or a set that already exists.
ProcessSet add_process_set(std::vector<int> ranks);

// Ends a set's engine, failing what is pending in it. Collective, as add_process_set.
void remove_process_set(const ProcessSet& set);

// The set's job ranks, ascending (every rank for the global set).
std::vector<int> process_set_ranks(const ProcessSet& set);
// This rank's index within the set, or -1 when it is not a member.
int process_set_rank(const ProcessSet& set);
int process_set_size(const ProcessSet& set);

}  // namespace kolo
