// Fashion-MNIST, trained data-parallel with kolo::torch:
//
//   kolorun -np 2 build/examples/fashion_mnist --epochs 1
//
// Every rank reads the dataset, trains on its own shard of each epoch, and the
// DistributedOptimizer averages the gradients. Rank 0 reports progress the way
// MXNet's Speedometer does, then the validation accuracy over all ranks.
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "idx_file.h"
#include "kolo/torch.h"
#include "net.h"

namespace fashion_mnist {
namespace {

struct Flags {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int epochs = 1;
  int batch_size = 64;
  double lr = 0.001;  // per worker: the job uses lr x workers
  std::string compression = "none";
  int powersgd_rank = 0;  // 0: gradients allreduced whole
  std::int64_t powersgd_start_step = 100;  // whole gradients first: docs/benchmarks.md "Accuracy"
  std::uint64_t seed = 42;
  int threads = 0;  // 0: the host's cores shared among the local ranks
  int log_interval = 50;
};

// The mean and standard deviation of Fashion-MNIST's training pixels, in [0, 1].
constexpr double kPixelMean = 0.2860;
constexpr double kPixelStd = 0.3530;

struct Split {
  torch::Tensor images;  // uint8 [N, 28, 28]
  torch::Tensor labels;  // int64 [N]
  std::int64_t size() const { return labels.size(0); }
};

Split load_split(const std::string& dir, const std::string& name) {
  RawSplit raw = read_split(dir, name);
  const std::int64_t count = raw.labels.dims[0];
  Split split;
  split.images = torch::from_blob(raw.images.data.data(), {count, 28, 28}, torch::kUInt8).clone();
  split.labels = torch::from_blob(raw.labels.data.data(), {count}, torch::kUInt8).to(torch::kLong);
  return split;
}

// A normalized float batch [B, 1, 28, 28] of the given samples.
torch::Tensor batch_images(const Split& split, const torch::Tensor& index) {
  return split.images.index_select(0, index).unsqueeze(1).to(torch::kFloat).div_(255).sub_(kPixelMean).div_(
      kPixelStd);
}

torch::Tensor to_index(const std::vector<std::size_t>& indices) {
  std::vector<std::int64_t> as_int64(indices.begin(), indices.end());
  return torch::tensor(as_int64, torch::kLong);
}

// Every `interval` batches, rank 0 prints the job's throughput and the training
// accuracy of those batches over all ranks, in MXNet's Speedometer format.
class Speedometer {
 public:
  Speedometer(int interval) : interval_(interval) {}

  void start_epoch(int epoch) {
    epoch_ = epoch;
    window_start_ = 0;
    samples_ = 0;
    accuracy_.reset();
    started_ = Clock::now();
  }

  // Collective every `interval` batches: every rank must report every batch.
  void batch_done(int batch, std::int64_t correct, std::int64_t count) {
    samples_ += count;
    accuracy_.update(static_cast<double>(correct) / static_cast<double>(count), static_cast<double>(count));
    if ((batch + 1) % interval_ != 0) return;
    const double accuracy = accuracy_.global("speedometer.accuracy");
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    const double speed = static_cast<double>(samples_ * kolo::size()) / seconds;
    if (kolo::rank() == 0) {
      std::printf("Epoch[%d] Batch [%d-%d]  Speed: %.2f samples/sec  accuracy=%f\n", epoch_, window_start_, batch + 1,
                  speed, accuracy);
      std::fflush(stdout);
    }
    window_start_ = batch + 1;
    samples_ = 0;
    accuracy_.reset();
    started_ = Clock::now();
  }

 private:
  using Clock = std::chrono::steady_clock;
  int interval_;
  int epoch_ = 0;
  int window_start_ = 0;
  std::int64_t samples_ = 0;
  kolo::torch::MetricAverage accuracy_;
  Clock::time_point started_;
};

void train_epoch(Net& model, kolo::torch::DistributedOptimizer& optimizer, const Split& train,
                 kolo::torch::DistributedSampler& sampler, int batch_size, Speedometer& speedometer) {
  model->train();
  const auto& indices = sampler.indices();
  int batch = 0;
  for (std::size_t begin = 0; begin < indices.size(); begin += static_cast<std::size_t>(batch_size), ++batch) {
    const std::size_t end = std::min(indices.size(), begin + static_cast<std::size_t>(batch_size));
    torch::Tensor index = to_index({indices.begin() + static_cast<std::ptrdiff_t>(begin),
                                    indices.begin() + static_cast<std::ptrdiff_t>(end)});
    torch::Tensor labels = train.labels.index_select(0, index);

    optimizer.zero_grad();
    torch::Tensor logits = model->forward(batch_images(train, index));
    torch::nn::functional::cross_entropy(logits, labels).backward();
    optimizer.step();

    const auto correct = logits.argmax(1).eq(labels).sum().item<std::int64_t>();
    speedometer.batch_done(batch, correct, labels.size(0));
  }
}

// The accuracy on the whole validation split: rank r scores samples r, r + size,
// ..., and the counts are summed over the ranks.
double evaluate(Net& model, const Split& test) {
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor mine = torch::arange(kolo::rank(), test.size(), kolo::size(), torch::kLong);
  kolo::torch::MetricAverage accuracy;
  for (std::int64_t begin = 0; begin < mine.size(0); begin += 1000) {
    torch::Tensor index = mine.slice(0, begin, std::min<std::int64_t>(begin + 1000, mine.size(0)));
    torch::Tensor labels = test.labels.index_select(0, index);
    torch::Tensor predicted = model->forward(batch_images(test, index)).argmax(1);
    const double count = static_cast<double>(labels.size(0));
    accuracy.update(predicted.eq(labels).sum().item<double>() / count, count);
  }
  return accuracy.global("validation.accuracy");
}

int default_threads() {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / kolo::local_size());
}

void train(const Flags& flags) {
  const int threads = flags.threads > 0 ? flags.threads : default_threads();
  torch::set_num_threads(threads);
  const Split train = load_split(flags.data_dir, "train");
  const Split test = load_split(flags.data_dir, "t10k");

  torch::manual_seed(flags.seed);
  Net model;
  kolo::torch::broadcast_parameters(*model, 0);

  const double lr = flags.lr * kolo::size();
  auto adam = std::make_shared<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(lr));
  kolo::torch::DistributedOptimizerOptions options;
  options.compression = kolo::torch::parse_compression(flags.compression);
  std::shared_ptr<kolo::torch::PowerSGD> powersgd;
  if (flags.powersgd_rank > 0) {
    powersgd = std::make_shared<kolo::torch::PowerSGD>(
        kolo::torch::PowerSGDOptions{.rank = flags.powersgd_rank, .start_step = flags.powersgd_start_step});
    options.compressor = powersgd;
  }
  kolo::torch::DistributedOptimizer optimizer(adam, model->named_parameters(), options);
  kolo::torch::broadcast_optimizer_state(optimizer, 0);

  if (kolo::rank() == 0) {
    const std::string compression =
        flags.powersgd_rank > 0 ? "powersgd rank " + std::to_string(flags.powersgd_rank) : flags.compression;
    std::printf("fashion_mnist: %d worker(s), %lld training samples, batch %d per worker, lr %g (%g x %d), "
                "compression %s, %d thread(s) per worker\n",
                kolo::size(), static_cast<long long>(train.size()), flags.batch_size, lr, flags.lr, kolo::size(),
                compression.c_str(), threads);
    std::fflush(stdout);
  }

  kolo::torch::DistributedSampler sampler(static_cast<std::size_t>(train.size()), {.seed = flags.seed});
  Speedometer speedometer(flags.log_interval);
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto started = std::chrono::steady_clock::now();
    sampler.set_epoch(static_cast<std::uint64_t>(epoch));
    speedometer.start_epoch(epoch);
    train_epoch(model, optimizer, train, sampler, flags.batch_size, speedometer);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double accuracy = evaluate(model, test);
    if (kolo::rank() == 0) {
      std::printf("Epoch[%d] Time cost=%.3f\nEpoch[%d] Validation-accuracy=%f\n", epoch, seconds, epoch, accuracy);
      std::fflush(stdout);
    }
  }
  // What one worker gives the allreduces in a step (the last one): the
  // gradients, or PowerSGD's factors and the gradients it leaves whole.
  std::int64_t whole = 0;
  for (const auto& p : model->parameters()) whole += p.numel();
  const std::int64_t numbers =
      powersgd ? whole - powersgd->last_compressed_elements() + powersgd->last_sent_elements() : whole;
  const std::int64_t bytes = numbers * (options.compression == kolo::torch::Compression::None ? 4 : 2);
  if (kolo::rank() == 0) {
    std::printf("Gradient bytes per step: %lld of %lld\n", static_cast<long long>(bytes),
                static_cast<long long>(4 * whole));
  }
}

}  // namespace
}  // namespace fashion_mnist

int main(int argc, char** argv) {
  fashion_mnist::Flags flags;
  CLI::App app("Fashion-MNIST data-parallel training with kolo::torch (run under kolorun)");
  app.add_option("--data-dir", flags.data_dir, "Folder with the (gzipped) IDX files")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Passes over the training set")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", flags.batch_size, "Samples per batch on each worker")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr", flags.lr, "Learning rate per worker (scaled by the number of workers)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compression", flags.compression, "Gradient compression")
      ->check(CLI::IsMember({"none", "fp16", "bf16"}))
      ->capture_default_str();
  app.add_option("--powersgd-rank", flags.powersgd_rank,
                 "PowerSGD: low-rank gradients of this rank with error feedback (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--powersgd-start-step", flags.powersgd_start_step,
                 "PowerSGD: steps with whole gradients before compression starts")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", flags.seed, "Seed of the initial weights and the shuffling")->capture_default_str();
  app.add_option("--threads", flags.threads, "Intra-op threads per worker (0: cores / local workers)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--log-interval", flags.log_interval, "Batches between progress lines")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    kolo::init();
    fashion_mnist::train(flags);
    kolo::shutdown();
  } catch (const fashion_mnist::DatasetError& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fashion_mnist: %s\n", e.what());
    return 1;
  }
  return 0;
}
