#include "size_plan.h"

#include <algorithm>
#include <cmath>

namespace kolo::bench {
namespace {

SizePoint shape_for(std::size_t bytes, Collective c, std::size_t elem, std::size_t n) {
  SizePoint p;
  switch (c) {
    case Collective::Allreduce:
    case Collective::Broadcast:
      p.block_count = std::max<std::size_t>(1, bytes / elem);
      p.send_count = p.recv_count = p.block_count;
      p.bytes = p.block_count * elem;
      break;
    case Collective::Allgather:
      p.block_count = std::max<std::size_t>(1, bytes / (elem * n));
      p.send_count = p.block_count;
      p.recv_count = p.block_count * n;
      p.bytes = p.recv_count * elem;
      break;
    case Collective::Reducescatter:
      p.block_count = std::max<std::size_t>(1, bytes / (elem * n));
      p.send_count = p.block_count * n;
      p.recv_count = p.block_count;
      p.bytes = p.send_count * elem;
      break;
    case Collective::Alltoall:
      p.block_count = std::max<std::size_t>(1, bytes / (elem * n));
      p.send_count = p.recv_count = p.block_count * n;
      p.bytes = p.send_count * elem;
      break;
  }
  return p;
}

// Large sizes under a byte budget run fewer iterations; every rank computes the
// same counts from the same options, so no agreement is needed.
void apply_budget(SizePoint& p, const BenchOptions& o) {
  p.warmup = o.warmup;
  p.iters = o.iters;
  if (o.budget_bytes == 0) return;
  const auto fit = static_cast<int>(std::min<std::size_t>(o.budget_bytes / p.bytes, 1 << 30));
  p.iters = std::clamp(fit, std::min(2, o.iters), o.iters);
  p.warmup = std::clamp(fit / 4, std::min(1, o.warmup), o.warmup);
}

}  // namespace

std::vector<SizePoint> plan_sizes(const BenchOptions& options, int nranks) {
  std::vector<SizePoint> points;
  const std::size_t elem = elem_size(options.type);
  const auto n = static_cast<std::size_t>(std::max(nranks, 1));
  auto add = [&](std::size_t bytes) {
    SizePoint p = shape_for(bytes, options.collective, elem, n);
    if (!points.empty() && points.back().bytes == p.bytes) return;
    apply_budget(p, options);
    points.push_back(p);
  };
  if (!options.sizes.empty()) {
    for (auto bytes : options.sizes) add(bytes);
    return points;
  }
  std::size_t bytes = options.min_bytes;
  while (bytes <= options.max_bytes) {
    add(bytes);
    const auto next = static_cast<double>(bytes) * options.step_factor;
    bytes = next >= static_cast<double>(options.max_bytes) + 1 ? options.max_bytes + 1
                                                                 : std::max(bytes + 1, static_cast<std::size_t>(next));
  }
  return points;
}

}  // namespace kolo::bench
