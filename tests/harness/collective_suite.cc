#include "harness/collective_suite.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "harness/values.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

// Element mismatches reported per operation; the rest only counted.
constexpr int kReportedPerOperation = 5;

std::string label(const char* op, DataType dtype, std::int64_t count) {
  return std::string(op) + "." + to_string(dtype) + "." + std::to_string(count);
}

std::string number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

void expect_bitwise_equal_everywhere(const void* data, std::size_t bytes, const std::string& what,
                                     SuiteFailures& failures) {
  for (const auto& problem : differences_between_ranks(fnv1a(data, bytes), what)) failures.add(problem);
}

// `data` holds the allreduce of make_values(r, ...) over every rank r with `op`.
void check_reduced_elements(const void* data, std::int64_t first_index, std::int64_t count, DataType dtype,
                            ReduceOp op, int salt, const std::string& what, SuiteFailures& failures) {
  int wrong = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const double want = expected_reduction(kolo::size(), first_index + i, dtype, op, salt);
    const double got = read_element(data, dtype, i);
    if (std::fabs(got - want) <= tolerance(dtype, want)) continue;
    if (++wrong <= kReportedPerOperation)
      failures.add(what + " (" + to_string(op) + ") element " + std::to_string(first_index + i) + ": got " +
                   number(got) + ", want " + number(want));
  }
  if (wrong > kReportedPerOperation)
    failures.add(what + ": " + std::to_string(wrong) + " of " + std::to_string(count) + " elements are wrong");
}

}  // namespace

std::vector<std::string> differences_between_ranks(std::uint64_t value, const std::string& what) {
  return differences_between_ranks(std::vector<std::uint64_t>{value}, {what});
}

std::vector<std::string> differences_between_ranks(const std::vector<std::uint64_t>& values,
                                                   const std::vector<std::string>& whats) {
  const auto count = static_cast<std::int64_t>(values.size());
  std::vector<std::int64_t> mine(values.begin(), values.end());
  Buffer all = kolo::allgather(Tensor{mine.data(), DataType::Int64, {1, count}}, {.name = "agree:" + whats.front()});
  std::vector<std::string> problems;
  for (int r = 0; r < kolo::size(); ++r) {
    for (std::int64_t i = 0; i < count; ++i) {
      if (all.as<std::int64_t>()[r * count + i] != mine[i])
        problems.push_back(whats[i] + " differs between rank " + std::to_string(r) + " and rank " +
                           std::to_string(kolo::rank()));
    }
  }
  return problems;
}

const std::vector<DataType> kAllDataTypes = {DataType::UInt8,    DataType::Int8,    DataType::Int16,
                                             DataType::Int32,    DataType::Int64,   DataType::Float16,
                                             DataType::BFloat16, DataType::Float32, DataType::Float64,
                                             DataType::Bool};
const std::vector<ReduceOp> kAllReduceOps = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max,
                                             ReduceOp::Product};

std::vector<std::int64_t> suite_sizes(DataType dtype, std::int64_t fusion_threshold, std::int64_t large_bytes) {
  const auto element = static_cast<std::int64_t>(element_size(dtype));
  return {0, 1, 7919, large_bytes / element, fusion_threshold / element * 3 + 5};
}

void sweep_allreduce(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, bool wrong_inputs,
                     const ProcessSet& set) {
  // Every op in flight at once, as a training step submits its tensors.
  struct InFlight {
    ReduceOp op;
    std::string what;
    std::vector<std::byte> data;
    Handle handle;
  };
  std::vector<InFlight> ops;
  for (ReduceOp op : kAllReduceOps) {
    if (dtype == DataType::Bool && op == ReduceOp::Average) continue;  // rejected, tested elsewhere
    auto& flight = ops.emplace_back(
        InFlight{op, label("allreduce", dtype, count) + "." + to_string(op),
                 make_values(kolo::rank(), count, dtype, wrong_inputs ? salt + 7777 : salt), Handle{}});
    flight.handle = kolo::allreduce_async(Tensor{flight.data.data(), dtype, {count}},
                                          {.op = op, .name = flight.what, .process_set = set});
  }
  std::vector<std::uint64_t> hashes;
  std::vector<std::string> whats;
  for (auto& flight : ops) {
    flight.handle.wait();
    check_reduced_elements(flight.data.data(), 0, count, dtype, flight.op, salt, flight.what, failures);
    hashes.push_back(fnv1a(flight.data.data(), flight.data.size()));
    whats.push_back(flight.what);
  }
  for (const auto& problem : differences_between_ranks(hashes, whats)) failures.add(problem);
}

void sweep_allgather(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set) {
  // Rank r contributes count + r rows of 2 elements: first dimensions differ.
  const int me = kolo::rank();
  auto what = label("allgather", dtype, count);
  auto mine = make_values(me, (count + me) * 2, dtype, salt);
  Buffer out = kolo::allgather(Tensor{mine.data(), dtype, {count + me, 2}}, {.name = what, .process_set = set});
  std::int64_t rows = 0;
  for (int r = 0; r < kolo::size(); ++r) rows += count + r;
  if (out.shape() != Shape{rows, 2}) {
    failures.add(what + ": the result has " + std::to_string(out.shape().empty() ? 0 : out.shape()[0]) +
                 " rows, want " + std::to_string(rows));
  } else {
    std::size_t offset = 0;
    for (int r = 0; r < kolo::size(); ++r) {
      auto theirs = make_values(r, (count + r) * 2, dtype, salt);
      // memcmp of no bytes still needs valid pointers, and empty buffers have none.
      if (!theirs.empty() &&
          std::memcmp(static_cast<const std::byte*>(out.data()) + offset, theirs.data(), theirs.size()) != 0)
        failures.add(what + ": the rows from rank " + std::to_string(r) + " differ");
      offset += theirs.size();
    }
  }
  expect_bitwise_equal_everywhere(out.data(), out.nbytes(), what, failures);
}

void sweep_broadcast(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set) {
  const int root = kolo::size() - 1;
  auto what = label("broadcast", dtype, count);
  auto data = make_values(kolo::rank(), count, dtype, salt);
  kolo::broadcast(Tensor{data.data(), dtype, {count}}, root, {.name = what, .process_set = set});
  if (data != make_values(root, count, dtype, salt)) failures.add(what + ": not root " + std::to_string(root) + "'s data");
}

void sweep_alltoall(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures, const ProcessSet& set) {
  // Rank s sends (count % 5) + s + d rows to rank d: uneven, rank-dependent splits.
  const int n = kolo::size();
  const int me = kolo::rank();
  auto rows_from = [&](int s, int d) { return count % 5 + s + d; };
  std::vector<std::int64_t> splits;
  std::int64_t total = 0;
  for (int d = 0; d < n; ++d) {
    splits.push_back(rows_from(me, d));
    total += splits.back();
  }
  auto what = label("alltoall", dtype, count);
  auto mine = make_values(me, total, dtype, salt);
  Handle h = kolo::alltoall_async(Tensor{mine.data(), dtype, {total}}, splits, {.name = what, .process_set = set});
  h.wait();
  Buffer out = h.take_output();
  std::int64_t offset = 0;
  for (int s = 0; s < n; ++s) {
    const std::string from = what + ": from rank " + std::to_string(s);
    if (h.received_splits()[s] != rows_from(s, me))
      failures.add(from + ", " + std::to_string(h.received_splits()[s]) + " rows, want " +
                   std::to_string(rows_from(s, me)));
    // Rank s's rows for me start after its rows for ranks before me.
    std::int64_t start = 0;
    for (int d = 0; d < me; ++d) start += rows_from(s, d);
    auto theirs = make_values(s, start + rows_from(s, me), dtype, salt);
    for (std::int64_t i = 0; i < rows_from(s, me) && offset + i < out.shape()[0]; ++i) {
      if (read_element(out.data(), dtype, offset + i) != read_element(theirs.data(), dtype, start + i)) {
        failures.add(from + ", row " + std::to_string(i) + " differs");
        break;
      }
    }
    offset += rows_from(s, me);
  }
  if (out.shape()[0] != offset)
    failures.add(what + ": " + std::to_string(out.shape()[0]) + " rows received, want " + std::to_string(offset));
}

void sweep_reducescatter(DataType dtype, std::int64_t count, int salt, SuiteFailures& failures,
                         const ProcessSet& set) {
  const int n = kolo::size();
  const int me = kolo::rank();
  // Both ops in flight at once, from the same input (reducescatter does not write it).
  auto input = make_values(me, count, dtype, salt);
  std::vector<std::pair<ReduceOp, Handle>> ops;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    if (dtype == DataType::Bool && op == ReduceOp::Average) continue;
    auto what = label("reducescatter", dtype, count) + "." + to_string(op);
    ops.emplace_back(op, kolo::reducescatter_async(Tensor{input.data(), dtype, {count}}, op,
                                                   {.name = what, .process_set = set}));
  }
  for (auto& [op, handle] : ops) {
    auto what = label("reducescatter", dtype, count) + "." + to_string(op);
    handle.wait();
    Buffer out = handle.take_output();
    std::int64_t begin = 0;
    for (int r = 0; r < me; ++r) begin += count / n + (r < count % n ? 1 : 0);
    const std::int64_t mine = count / n + (me < count % n ? 1 : 0);
    if (out.shape() != Shape{mine}) {
      failures.add(what + ": this rank's block has " + std::to_string(out.shape().empty() ? 0 : out.shape()[0]) +
                   " rows, want " + std::to_string(mine));
      continue;
    }
    check_reduced_elements(out.data(), begin, mine, dtype, op, salt, what, failures);
  }
}

int sweep_every_collective(const SuiteSettings& settings, SuiteFailures& failures) {
  const bool wrong_inputs = kolo::rank() == settings.wrong_inputs_rank;
  int salt = 0;
  for (DataType dtype : kAllDataTypes) {
    for (std::int64_t count : suite_sizes(dtype, settings.fusion_threshold, settings.large_bytes)) {
      ++salt;
      const ProcessSet& set = settings.process_set;
      sweep_allreduce(dtype, count, salt, failures, wrong_inputs, set);
      sweep_allgather(dtype, count, salt, failures, set);
      sweep_broadcast(dtype, count, salt, failures, set);
      sweep_alltoall(dtype, count, salt, failures, set);
      sweep_reducescatter(dtype, count, salt, failures, set);
    }
  }
  return salt;
}

namespace {

void check_grouped_allreduce(SuiteFailures& failures) {
  struct Member {
    DataType dtype;
    std::int64_t count;
  };
  // Mixed dtypes, one member large enough to exceed a lowered fusion threshold.
  const Member members[] = {{DataType::Float32, 33}, {DataType::Float64, 1000}, {DataType::Int32, 7919},
                            {DataType::BFloat16, 70001}, {DataType::UInt8, 1}};
  for (int step = 0; step < 2; ++step) {
    const int salt = 1000 + step;
    std::vector<std::vector<std::byte>> data;
    std::vector<Tensor> tensors;
    for (const auto& m : members) {
      data.push_back(make_values(kolo::rank(), m.count, m.dtype, salt));
      tensors.push_back(Tensor{data.back().data(), m.dtype, {m.count}});
    }
    kolo::grouped_allreduce(tensors, {.op = ReduceOp::Sum, .name = "grouped"});
    for (std::size_t i = 0; i < data.size(); ++i) {
      const std::string what = "grouped.step" + std::to_string(step) + "." + std::to_string(i) + "." +
                               to_string(members[i].dtype);
      check_reduced_elements(data[i].data(), 0, members[i].count, members[i].dtype, ReduceOp::Sum, salt, what,
                             failures);
      expect_bitwise_equal_everywhere(data[i].data(), data[i].size(), what, failures);
    }
  }
}

// Rank r runs 2 + r steps and then joins: at step s the ranks r >= s - 1 still
// contribute r + 1 each, the joined ones zeros. The last rank joins last.
void check_join(SuiteFailures& failures) {
  const int n = kolo::size(), me = kolo::rank();
  for (int step = 0; step < 2 + me; ++step) {
    std::vector<double> values(10, me + 1);
    kolo::allreduce(Tensor{values.data(), DataType::Float64, {10}},
                    {.op = ReduceOp::Sum, .name = "join.step" + std::to_string(step)});
    double want = 0;
    for (int r = std::max(0, step - 1); r < n; ++r) want += r + 1;
    if (values[9] != want)
      failures.add("allreduce join.step" + std::to_string(step) + " with joined ranks: got " + number(values[9]) +
                   ", want " + number(want));
  }
  const int last = kolo::join();
  if (last != n - 1) failures.add("join: the last rank to join was " + std::to_string(last) + ", want " + std::to_string(n - 1));
  double x = 1.0;
  kolo::allreduce(Tensor{&x, DataType::Float64, {1}}, {.op = ReduceOp::Sum, .name = "after-join"});
  if (x != n) failures.add("allreduce after join: got " + number(x) + ", want " + std::to_string(n));
}

}  // namespace

void check_barrier_grouped_and_join(SuiteFailures& failures) {
  kolo::barrier({.name = "suite.barrier.before"});
  check_grouped_allreduce(failures);
  check_join(failures);
  kolo::barrier({.name = "suite.barrier.after"});
}

}  // namespace kolo::testing
