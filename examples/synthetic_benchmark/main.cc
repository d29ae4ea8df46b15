// Horovod's synthetic benchmark in C++: trains ResNet on random data with kolo's
// DistributedOptimizer and reports images per second.
//
//   kolorun -np 2 build/examples/synthetic_benchmark/synthetic_benchmark --model resnet50
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kolo/torch.h"
#include "resnet.h"

namespace synthetic {
namespace {

struct Flags {
  std::string model = "resnet50";
  int batch_size = 32;
  // 48x48 keeps a ResNet-50 batch of 32 near a second of one CPU core (ResNet-18
  // needs about half); 224 is ImageNet's size, for machines with more to give.
  int image_size = 48;
  int num_classes = 1000;
  int num_warmup_batches = 10;
  int num_iters = 10;
  int num_batches_per_iter = 10;
  std::string compression = "none";
  int powersgd_rank = 0;  // 0: gradients allreduced whole
  int threads = 0;  // 0: the host's cores shared among the local ranks
  // No gradient allreduce: the workers only meet once a step (an 8-byte
  // allreduce), so each step lasts as long as the slower worker's. What
  // synchronous training can reach on the machine at all, whatever carries the
  // gradients (bench/run_training_bench.sh's "lockstep" row).
  bool lockstep_only = false;
};

void log(const std::string& line) {
  if (kolo::rank() != 0) return;
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::string format(const char* pattern, double a, double b = 0) {
  char line[256];
  std::snprintf(line, sizeof line, pattern, a, b);
  return line;
}

int default_threads() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / kolo::local_size());
}

class Benchmark {
 public:
  explicit Benchmark(const Flags& flags)
      : model_(make_resnet(flags.model, flags.num_classes)),
        data_(torch::randn({flags.batch_size, 3, flags.image_size, flags.image_size})),
        target_(torch::randint(flags.num_classes, {flags.batch_size}, torch::kLong)) {
    kolo::torch::broadcast_parameters(*model_, 0);
    sgd_ = std::make_shared<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.01 * kolo::size()));
    if (flags.lockstep_only) return;
    kolo::torch::DistributedOptimizerOptions options;
    options.compression = kolo::torch::parse_compression(flags.compression);
    if (flags.powersgd_rank > 0) {
      options.compressor =
          std::make_shared<kolo::torch::PowerSGD>(kolo::torch::PowerSGDOptions{.rank = flags.powersgd_rank});
    }
    optimizer_.emplace(sgd_, model_->named_parameters(), options);
  }

  void step() {
    optimizer_ ? optimizer_->zero_grad() : sgd_->zero_grad();
    torch::nn::functional::cross_entropy(model_->forward(data_), target_).backward();
    if (optimizer_) {
      optimizer_->step();
      return;
    }
    float meet = 0;  // --lockstep-only: the workers meet, the gradients stay
    kolo::allreduce(kolo::Tensor{&meet, kolo::DataType::Float32, {1}}, {.name = "lockstep"});
    sgd_->step();
  }

  // Seconds for `batches` steps.
  std::int64_t parameter_count() const {
    std::int64_t count = 0;
    for (const auto& parameter : model_->parameters()) count += parameter.numel();
    return count;
  }

  double time(int batches) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < batches; ++i) step();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  ResNet model_;
  torch::Tensor data_;
  torch::Tensor target_;
  std::shared_ptr<torch::optim::SGD> sgd_;
  std::optional<kolo::torch::DistributedOptimizer> optimizer_;  // empty with --lockstep-only
};

void run(const Flags& flags) {
  const int threads = flags.threads > 0 ? flags.threads : default_threads();
  torch::set_num_threads(threads);
  torch::manual_seed(42);
  Benchmark benchmark(flags);

  log("Model: " + flags.model);
  log("Parameters: " + std::to_string(benchmark.parameter_count()));
  log("Batch size: " + std::to_string(flags.batch_size));
  log("Image size: " + std::to_string(flags.image_size));
  log("Number of workers: " + std::to_string(kolo::size()) + " (" + std::to_string(threads) + " thread(s) each)");
  log("Compression: " + (flags.powersgd_rank > 0 ? "powersgd rank " + std::to_string(flags.powersgd_rank)
                                                  : flags.compression));
  if (flags.lockstep_only) log("Gradients: not allreduced (--lockstep-only: one 8-byte allreduce a step)");

  log("Running warmup...");
  benchmark.time(flags.num_warmup_batches);

  log("Running benchmark...");
  std::vector<double> img_secs;
  for (int i = 0; i < flags.num_iters; ++i) {
    const double seconds = benchmark.time(flags.num_batches_per_iter);
    const double img_sec = flags.batch_size * flags.num_batches_per_iter / seconds;
    log("Iter #" + std::to_string(i) + ": " + format("%.1f img/sec per worker", img_sec));
    img_secs.push_back(img_sec);
  }

  const double mean = std::accumulate(img_secs.begin(), img_secs.end(), 0.0) / static_cast<double>(img_secs.size());
  double variance = 0;
  for (double x : img_secs) variance += (x - mean) * (x - mean);
  const double conf = 1.96 * std::sqrt(variance / static_cast<double>(img_secs.size()));
  const int size = kolo::size();
  log(format("Img/sec per worker: %.1f +-%.1f", mean, conf));
  log("Total img/sec on " + std::to_string(size) + " worker(s): " + format("%.1f +-%.1f", size * mean, size * conf));
}

}  // namespace
}  // namespace synthetic

int main(int argc, char** argv) {
  synthetic::Flags flags;
  CLI::App app("Synthetic ResNet training benchmark with kolo::torch (run under kolorun)");
  app.add_option("--model", flags.model, "resnet18 or resnet50")
      ->check(CLI::IsMember({"resnet18", "resnet50"}))
      ->capture_default_str();
  app.add_option("--batch-size", flags.batch_size, "Images per batch on each worker")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--image-size", flags.image_size, "Height and width of the random images")
      ->check(CLI::Range(32, 1024))
      ->capture_default_str();
  app.add_option("--num-classes", flags.num_classes, "Output classes")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--num-warmup-batches", flags.num_warmup_batches, "Batches before timing")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--num-iters", flags.num_iters, "Timed iterations")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--num-batches-per-iter", flags.num_batches_per_iter, "Batches per timed iteration")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compression", flags.compression, "Gradient compression")
      ->check(CLI::IsMember({"none", "fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--powersgd-rank", flags.powersgd_rank,
                 "PowerSGD: low-rank gradients of this rank with error feedback (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--threads", flags.threads, "Intra-op threads per worker (0: cores / local workers)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--lockstep-only", flags.lockstep_only,
               "Do not allreduce the gradients; only meet once a step (an 8-byte allreduce): the ceiling of "
               "synchronous training on this machine");
  CLI11_PARSE(app, argc, argv);

  try {
    kolo::init();
    synthetic::run(flags);
    kolo::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "synthetic_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
