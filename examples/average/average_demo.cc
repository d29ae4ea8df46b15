// The smallest kolo program: every rank holds a tensor filled with its rank, and
// the job averages them. Run it with `kolorun -np 4 build/examples/average_demo`.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kolo/kolo.h"

int main(int argc, char** argv) {
  std::size_t mib = 64;
  int iterations = 10;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) mib = std::strtoul(argv[++i], nullptr, 10);
    else if (arg == "--iters" && i + 1 < argc) iterations = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--mib N] [--iters N]\n", argv[0]);
      return 2;
    }
  }
  if (mib == 0 || iterations <= 0) {
    std::fprintf(stderr, "--mib and --iters must be positive\n");
    return 2;
  }

  kolo::init();
  const int rank = kolo::rank();
  const int size = kolo::size();
  std::vector<float> data(mib * (1 << 20) / sizeof(float));

  double best_ms = 1e30;
  for (int it = 0; it < iterations; ++it) {
    std::fill(data.begin(), data.end(), static_cast<float>(rank));
    auto start = std::chrono::steady_clock::now();
    kolo::allreduce(kolo::make_tensor(data.data(), static_cast<std::int64_t>(data.size())),
                    {.op = kolo::ReduceOp::Average, .name = "demo"});
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    best_ms = std::min(best_ms, ms);
  }

  const float expected = static_cast<float>(size - 1) / 2.0f;
  bool correct = data.front() == expected && data.back() == expected;
  if (rank == 0) {
    double bytes = static_cast<double>(data.size() * sizeof(float));
    double busbw = size > 1 ? bytes / (best_ms / 1e3) * 2.0 * (size - 1) / size / 1e9 : 0.0;
    std::printf("kolo: %d rank(s) averaged %zu MiB of float32: result %.2f (expected %.2f) %s\n", size, mib,
                data.front(), expected, correct ? "ok" : "WRONG");
    std::printf("kolo: best of %d allreduces %.2f ms, bus bandwidth %.2f GB/s\n", iterations, best_ms, busbw);
  }
  kolo::shutdown();
  return correct ? 0 : 1;
}
