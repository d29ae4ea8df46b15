// The public-API collective suite, run from inside an initialized kolo job on
// every rank: every collective x every dtype x sizes {0, 1, 7919, 1 MiB, above the
// fusion threshold}, each result checked on this rank against the references of
// values.h (exact for integers) and, where every rank holds the same result,
// bitwise equal across ranks; then barrier, grouped allreduce and join. The
// allreduces (and reducescatters) of one dtype and size are in flight together.
//
// It runs with forked ranks (collectives_sweep_test.cc) and as a program of its
// own under kolorun or mpirun (programs/kolo_collective_suite.cc), so failures go
// to a callback instead of GoogleTest. Checks are local: a failed check never
// skips a collective, so every rank keeps submitting the same operations and a
// wrong answer is reported instead of turning into a hang.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kolo/process_set.h"
#include "kolo/types.h"

namespace kolo::testing {

// Collects the failures of one rank's run; `report` is called with each message.
class SuiteFailures {
 public:
  explicit SuiteFailures(std::function<void(const std::string&)> report) : report_(std::move(report)) {}
  void add(const std::string& message) {
    ++count_;
    report_(message);
  }
  int count() const { return count_; }

 private:
  std::function<void(const std::string&)> report_;
  int count_ = 0;
};

// Gathers `value` from every rank (through kolo) and describes each rank that
// holds another value than this one; empty when all agree.
std::vector<std::string> differences_between_ranks(std::uint64_t value, const std::string& what);
// The same for several values at once (one allgather); whats[i] names values[i].
std::vector<std::string> differences_between_ranks(const std::vector<std::uint64_t>& values,
                                                   const std::vector<std::string>& whats);

extern const std::vector<DataType> kAllDataTypes;
extern const std::vector<ReduceOp> kAllReduceOps;

// Element counts for `dtype`: 0, 1, 7919, `large_bytes` worth of elements, and 3x
// the fusion threshold (+5), so that the last exceeds it.
std::vector<std::int64_t> suite_sizes(DataType dtype, std::int64_t fusion_threshold, std::int64_t large_bytes);

struct SuiteSettings {
  std::int64_t fusion_threshold = 64 * 1024;
  std::int64_t large_bytes = 1 << 20;
  // To see the suite catch a wrong answer: this rank's allreduce inputs are not
  // the values the references assume. -1: none.
  int wrong_inputs_rank = -1;
  // The set the collectives run in: the global one by default; a set of every
  // rank, to run the sweep over a process set's own communicator.
  ProcessSet process_set;
};

// One collective on `count` elements of `dtype`; `salt` makes the values differ
// between calls. Operation names start with the collective's name, the dtype and
// the count ("allreduce.float32.7919.sum").
// `set` runs them among its members (a set of every rank gives the same results).
void sweep_allreduce(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures,
                     bool wrong_inputs = false, const ProcessSet& set = {});
void sweep_allgather(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set = {});
void sweep_broadcast(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set = {});
void sweep_alltoall(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set = {});
void sweep_reducescatter(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures,
                         const ProcessSet& set = {});

// Every collective above, for every dtype and size; returns the number of
// operations run.
int sweep_every_collective(const SuiteSettings& settings, SuiteFailures& failures);

// barrier, grouped allreduce of several dtypes and sizes, and join with ranks
// joining after different numbers of steps (the joined ranks contribute zeros).
void check_barrier_grouped_and_join(SuiteFailures& failures);

}  // namespace kolo::testing
