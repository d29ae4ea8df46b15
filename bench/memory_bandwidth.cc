// memory_bandwidth: what one core can move, the ceiling for a shared-memory
// collective where every byte passes through a CPU: memcpy (bytes copied per
// second) and a two-input float sum c = a + b (output bytes per second), the two
// kernels a shared-memory allreduce is made of.
//   memory_bandwidth --min-bytes 4K --max-bytes 256M --step-factor 4
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/bench_options.h"
#include "core/report.h"

namespace {

using namespace kolo::bench;
using Clock = std::chrono::steady_clock;

struct Row {
  std::size_t bytes;
  double copy_gbps;
  double sum_gbps;
};

// Keeps the compiler from dropping the kernels.
void consume(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

__attribute__((noinline)) void sum_floats(float* __restrict c, const float* __restrict a, const float* __restrict b,
                                          std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

template <typename F>
double best_gbps(std::size_t bytes, int warmup, int iters, F&& kernel) {
  for (int i = 0; i < warmup; ++i) kernel();
  double best_us = 1e300;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    kernel();
    best_us = std::min(best_us, std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  return static_cast<double>(bytes) / (best_us * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    auto o = parse_bench_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.show_help) {
      std::cout << bench_usage("memory_bandwidth", "One core's memcpy and float-sum bandwidth (best of --iters).");
      return 0;
    }
    std::vector<Row> rows;
    const std::size_t n_max = o.max_bytes / sizeof(float) + 1;
    std::vector<float> a(n_max, 1.0f), b(n_max, 2.0f), c(n_max, 0.0f);
    for (std::size_t bytes = std::max<std::size_t>(o.min_bytes, 64); bytes <= o.max_bytes;
         bytes = static_cast<std::size_t>(static_cast<double>(bytes) * o.step_factor)) {
      const std::size_t n = bytes / sizeof(float);
      const int iters = o.budget_bytes ? std::max<int>(2, std::min<std::size_t>(o.iters, o.budget_bytes / bytes)) : o.iters;
      const double copy = best_gbps(bytes, o.warmup, iters, [&] {
        std::memcpy(c.data(), a.data(), n * sizeof(float));
        consume(c.data());
      });
      const double sum = best_gbps(bytes, o.warmup, iters, [&] {
        sum_floats(c.data(), a.data(), b.data(), n);
        consume(c.data());
      });
      rows.push_back({n * sizeof(float), copy, sum});
    }
    if (o.json) {
      nlohmann::json j = {{"program", "memory_bandwidth"}, {"results", nlohmann::json::array()}};
      for (const auto& r : rows)
        j["results"].push_back({{"bytes", r.bytes}, {"memcpy_gbps", r.copy_gbps}, {"sum_gbps", r.sum_gbps}});
      std::cout << j.dump() << "\n";
    } else {
      std::printf("# memory_bandwidth  one core, best of %d  (GB/s = 1e9 bytes/s of output)\n#\n", o.iters);
      std::printf("# %12s %12s %12s\n", "size (B)", "memcpy", "c=a+b");
      for (const auto& r : rows) std::printf("  %12zu %12.2f %12.2f\n", r.bytes, r.copy_gbps, r.sum_gbps);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_bandwidth: %s\n", e.what());
    return 2;
  }
}
