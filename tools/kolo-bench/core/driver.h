// The sweep every benchmark program runs: for each size, fill the input, warm up,
// time each iteration, optionally check every rank's result, report on rank 0.
// Programs differ only in the Backend that runs one collective.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>

#include "bench_options.h"
#include "size_plan.h"

namespace kolo::bench {

// Runs the prepared collective once and returns where its result is (the receive
// buffer, or memory the backend owns such as a kolo::Buffer).
using RunOnce = std::function<const void*()>;

// One of the sweep's buffers: 64-byte aligned, zeroed, its pages faulted in.
using BufferMemory = std::shared_ptr<std::byte>;
BufferMemory aligned_memory(std::size_t bytes);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "kolo-comm", "mpi", "gloo-ring", ... and details for the report header.
  virtual std::string label() const = 0;
  virtual std::map<std::string, std::string> details() const { return {}; }
  // Throws UsageError when this backend cannot run these options.
  virtual void validate(const BenchOptions& options) const = 0;
  // Where the sweep's send and receive buffers live: plain aligned memory unless
  // the library allocates its own (kolo::Buffers, which kolo can share between
  // the ranks of a host).
  virtual BufferMemory allocate(std::size_t bytes) { return aligned_memory(bytes); }
  // Binds one size's buffers (send == recv when in place). Called once per size,
  // outside the timed region, so backends may build per-size state there.
  virtual RunOnce prepare(const BenchOptions& options, const SizePoint& point, void* send, void* recv) = 0;
  virtual void barrier() = 0;
  // Sum over all ranks, for the wrong-element counts.
  virtual std::int64_t sum_over_ranks(std::int64_t value) = 0;
};

// Returns 0, or 1 when --check found a wrong element on any rank.
int run_sweep(const BenchOptions& options, Backend& backend, const std::string& program, std::ostream& out);

}  // namespace kolo::bench
