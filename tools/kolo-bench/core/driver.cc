#include "driver.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

#include "pattern.h"
#include "report.h"

namespace kolo::bench {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<double> time_iterations(const RunOnce& run, int iters) {
  std::vector<double> times;
  times.reserve(static_cast<std::size_t>(iters));
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return times;
}

bool result_in_send(const BenchOptions& o) { return o.in_place || o.collective == Collective::Broadcast; }

}  // namespace

// 64-byte aligned, so every backend sees the alignment a real tensor allocator gives.
BufferMemory aligned_memory(std::size_t bytes) {
  const std::size_t rounded = std::max<std::size_t>(64, (bytes + 63) / 64 * 64);
  auto* p = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, rounded);  // fault the pages in before anything is timed
  return BufferMemory(p, [](std::byte* q) { std::free(q); });
}

int run_sweep(const BenchOptions& o, Backend& backend, const std::string& program, std::ostream& out) {
  backend.validate(o);
  const int rank = backend.rank();
  const int n = backend.size();
  if (o.collective == Collective::Broadcast && o.root >= n)
    throw UsageError("--root " + std::to_string(o.root) + " is not a rank of this job of " + std::to_string(n));
  const auto points = plan_sizes(o, n);
  std::size_t max_send = 0, max_recv = 0;
  for (const auto& p : points) {
    max_send = std::max(max_send, p.send_count);
    max_recv = std::max(max_recv, p.recv_count);
  }
  const std::size_t elem = elem_size(o.type);
  const BufferMemory send_memory = backend.allocate(max_send * elem);
  const BufferMemory recv_memory = result_in_send(o) ? send_memory : backend.allocate(max_recv * elem);
  void* const send = send_memory.get();
  void* const recv = recv_memory.get();

  // Only rank 0 prints; the others still run the whole protocol.
  std::ostringstream discard;
  Reporter reporter(rank == 0 ? out : discard, RunInfo{program, backend.label(), n, o, backend.details()});
  reporter.begin();
  std::int64_t total_wrong = 0;
  for (const auto& p : points) {
    fill_input(o, p, rank, send);
    if (!result_in_send(o)) poison(o.type, recv, p.recv_count);
    RunOnce run = backend.prepare(o, p, send, recv);
    backend.barrier();
    for (int i = 0; i < p.warmup; ++i) run();
    backend.barrier();
    const Stats stats = summarize(time_iterations(run, p.iters));
    std::int64_t wrong = -1;
    if (o.check) {
      // The timed runs may have changed an in-place input: start again from a known one.
      fill_input(o, p, rank, send);
      if (!result_in_send(o)) poison(o.type, recv, p.recv_count);
      backend.barrier();
      const void* result = run();
      wrong = backend.sum_over_ranks(static_cast<std::int64_t>(count_wrong(o, p, rank, n, result)));
      total_wrong += wrong;
    }
    reporter.add(make_row(p, stats, o.collective, n, wrong));
  }
  reporter.end();
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace kolo::bench
