// One worker of bench/run_ps_figure.sh: data-parallel training of ResNet-50's
// shape without its arithmetic. Each step takes a fixed compute time (a third
// forward, two thirds backward, slept, so that the CPUs stay free for the
// communication being measured) and, as backward reaches each of ResNet-50's
// 161 parameter tensors in reverse order, starts the averaging allreduce of its
// gradient, as DistributedOptimizer does; the step ends when all are done.
// Tensors are ResNet-50's sizes divided by --scale (at least one element), so
// that a step's bytes fit the shaped links of the benchmark.
//
//   figure1_worker [--steps 5] [--warmup 2] [--compute-ms 200] [--batch 64] [--scale 16]
//
// Rank 0 prints one line of JSON: workers, steps, seconds, samples_per_s,
// model_bytes (the gradient bytes one worker contributes per step).
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/resnet50_layers.h"
#include "kolo/kolo.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  int steps = 5;
  int warmup = 2;
  double compute_ms = 200;
  int batch = 64;
  int scale = 16;
};

Settings parse(int argc, char** argv) {
  Settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const double value = std::atof(argv[i + 1]);
    if (flag == "--steps") s.steps = static_cast<int>(value);
    else if (flag == "--warmup") s.warmup = static_cast<int>(value);
    else if (flag == "--compute-ms") s.compute_ms = value;
    else if (flag == "--batch") s.batch = static_cast<int>(value);
    else if (flag == "--scale") s.scale = static_cast<int>(value);
    else throw std::invalid_argument("unknown flag " + flag);
  }
  if (argc % 2 == 0 || s.steps < 1 || s.warmup < 0 || s.compute_ms < 0 || s.batch < 1 || s.scale < 1)
    throw std::invalid_argument("usage: figure1_worker [--steps N] [--warmup N] [--compute-ms MS] [--batch N] [--scale N]");
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Settings s = parse(argc, argv);
    kolo::init();
    const auto layers = kolo::bench::resnet50_parameters();
    std::vector<std::vector<float>> grads;
    std::size_t total = 0;
    for (const auto& layer : layers) {
      grads.emplace_back(std::max<std::size_t>(1, layer.numel / static_cast<std::size_t>(s.scale)), 1.0f);
      total += grads.back().size();
    }
    const auto forward = std::chrono::duration<double, std::milli>(s.compute_ms / 3);
    const auto backward = std::chrono::duration<double, std::milli>(s.compute_ms * 2 / 3);
    std::vector<kolo::Handle> handles(grads.size());
    auto step = [&] {
      const auto start = Clock::now();
      std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(forward));
      std::size_t done = 0;
      for (std::size_t i = grads.size(); i-- > 0;) {
        done += grads[i].size();
        const double part = static_cast<double>(done) / static_cast<double>(total);
        std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(forward + backward * part));
        handles[i] = kolo::allreduce_async(kolo::make_tensor(grads[i].data(), static_cast<std::int64_t>(grads[i].size())),
                                           {.name = layers[i].name});
      }
      for (auto& h : handles) h.wait();
    };
    for (int i = 0; i < s.warmup; ++i) step();
    kolo::barrier();
    const auto start = Clock::now();
    for (int i = 0; i < s.steps; ++i) step();
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (kolo::rank() == 0)
      std::printf("{\"workers\": %d, \"steps\": %d, \"seconds\": %.6f, \"samples_per_s\": %.3f, \"model_bytes\": %zu}\n",
                  kolo::size(), s.steps, seconds, kolo::size() * s.batch * s.steps / seconds, total * sizeof(float));
    kolo::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "figure1_worker: %s\n", e.what());
    return 1;
  }
}
