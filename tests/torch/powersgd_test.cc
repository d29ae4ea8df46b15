// PowerSGD across real processes: error feedback keeps every gradient it does
// not send, a rank at least the gradients' is exact, replicas stay bitwise
// equal, and bad settings or mismatched ranks are clear errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>
#include <vector>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/elastic.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/powersgd.h"
#include "support.h"

namespace kolo_torch_testing {
namespace {

using kolo::InvalidArgumentError;
using kolo::ReduceOp;
using kolo::torch::CompressorBinding;
using kolo::torch::DistributedOptimizer;
using kolo::torch::DistributedOptimizerOptions;
using kolo::torch::PowerSGD;
using kolo::torch::PowerSGDOptions;

constexpr int kInputs = 32;
constexpr int kOutputs = 16;
constexpr int kRowsForState = 2;

// Weights of 64 x 32 and 16 x 64: compressed at ranks below 10; biases travel whole.
::torch::nn::Sequential make_net(int seed) {
  at::manual_seed(seed);
  auto net = ::torch::nn::Sequential(::torch::nn::Linear(kInputs, 64), ::torch::nn::Tanh(),
                                     ::torch::nn::Linear(64, kOutputs));
  net->to(at::kDouble);
  return net;
}

std::pair<at::Tensor, at::Tensor> global_batch(int step, int rows) {
  at::manual_seed(500 + step);
  return {at::randn({rows, kInputs}, at::kDouble), at::randn({rows, kOutputs}, at::kDouble)};
}

std::shared_ptr<PowerSGD> powersgd(int rank, std::int64_t min_size = 0) {
  PowerSGDOptions options;
  options.rank = rank;
  options.min_size = min_size;
  return std::make_shared<PowerSGD>(options);
}

struct TrainRun {
  std::shared_ptr<PowerSGD> compressor;
  int passes = 1;
  int rows_per_rank = 2;
  double clip_factor = 1.0;
  int steps = 4;
  double tolerance = -1;  // against one worker with the whole batch; negative: not compared
};

// Trains with the compressor; every step's parameters must be bitwise equal on
// every rank, and within `tolerance` of one worker's with the whole batch.
void train(const TrainRun& run) {
  RankSession session;
  const int size = kolo::size();
  const int rank = kolo::rank();
  auto model = make_net(7);
  auto reference = make_net(7);
  DistributedOptimizerOptions options;
  options.backward_passes_per_step = run.passes;
  options.compressor = run.compressor;
  DistributedOptimizer optimizer(
      std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9)),
      model->named_parameters(), options);
  ::torch::optim::SGD reference_optimizer(reference->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int step = 0; step < run.steps; ++step) {
    const int rows = run.passes * size * run.rows_per_rank;
    auto [x, y] = global_batch(step, rows);
    optimizer.zero_grad();
    for (int pass = 0; pass < run.passes; ++pass) {
      const int offset = (pass * size + rank) * run.rows_per_rank;
      (at::mse_loss(model->forward(x.narrow(0, offset, run.rows_per_rank)), y.narrow(0, offset, run.rows_per_rank)) /
       run.passes)
          .backward();
    }
    if (run.clip_factor != 1.0) {
      optimizer.synchronize();
      for (auto& p : model->parameters()) p.mutable_grad().mul_(run.clip_factor);
    }
    optimizer.step();
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params." + std::to_string(step));
    reference_optimizer.zero_grad();
    (at::mse_loss(reference->forward(x), y) * run.clip_factor).backward();
    reference_optimizer.step();
    if (run.tolerance >= 0) {
      EXPECT_LE(relative_error(flat_parameters(*model), flat_parameters(*reference)), run.tolerance)
          << "step " << step << " on rank " << rank;
    }
  }
  if (size > 1) {
    EXPECT_EQ(run.compressor->steps(), run.steps);
    EXPECT_GT(run.compressor->last_compressed_elements(), 0);
  }
}

class PowerSGDTest : public ::testing::TestWithParam<int> {
 protected:
  void run(const TrainRun& setup) {
    kolo::testing::run_ranks(GetParam(), [&](int) { train(setup); });
  }
};

// A batch of B rows gives a Linear weight a gradient of rank at most B: with a
// rank at least the step's rows, one power iteration recovers the average.
TEST_P(PowerSGDTest, ARankAtLeastTheGradientsIsExact) {
  TrainRun setup;
  setup.rows_per_rank = 2;
  setup.compressor = powersgd(GetParam() * setup.rows_per_rank);
  setup.tolerance = 1e-9;
  run(setup);
}

TEST_P(PowerSGDTest, ComposesWithBackwardPassesPerStepAndClipping) {
  TrainRun setup;
  setup.passes = 2;
  setup.rows_per_rank = 1;
  setup.compressor = powersgd(GetParam() * setup.passes);
  setup.clip_factor = 0.5;
  setup.tolerance = 1e-9;
  run(setup);
}

TEST_P(PowerSGDTest, RankOneKeepsReplicasBitwiseEqual) {
  TrainRun setup;
  setup.compressor = powersgd(1);
  setup.rows_per_rank = 4;
  setup.steps = 6;
  run(setup);
}

INSTANTIATE_TEST_SUITE_P(Ranks, PowerSGDTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "Ranks"; });

// After k steps, what was applied plus the ranks' mean residual is the sum of
// the true mean gradients: error feedback loses nothing (fp64).
TEST(PowerSGD, ErrorFeedbackKeepsWhatItDoesNotSend) {
  kolo::testing::run_ranks(3, [](int rank) {
    RankSession session;
    const int size = kolo::size();
    PowerSGD compressor([] {
      PowerSGDOptions options;
      options.rank = 2;
      options.min_size = 0;
      return options;
    }());
    compressor.bind(CompressorBinding{});
    at::Tensor applied = at::zeros({24, 40}, at::kDouble);
    at::Tensor truth = at::zeros({24, 40}, at::kDouble);
    for (int step = 0; step < 6; ++step) {
      std::vector<at::Tensor> grads;
      for (int r = 0; r < size; ++r) {
        at::manual_seed(100 * step + r);
        grads.push_back(at::randn({24, 40}, at::kDouble));
      }
      truth += at::stack(grads).mean(0);
      at::Tensor grad = grads[rank].clone();
      ASSERT_TRUE(compressor.takes(grad));
      compressor.add("w", grad);
      compressor.finish();
      applied += grad;
      expect_identical_on_all_ranks(grad, "check.applied." + std::to_string(step));
      at::Tensor residual;
      for (const auto& [name, tensor] : compressor.memory()) {
        if (name == "local.error.w") residual = tensor.clone();
      }
      ASSERT_TRUE(residual.defined());
      residual = kolo::torch::allreduce(residual, {ReduceOp::Average, 1.0, 1.0, "check.residual"});
      EXPECT_LE(relative_error(applied + residual, truth), 1e-12) << "step " << step;
      // Rank 2 of a 24 x 40 matrix sends 2 x 64 numbers instead of 960.
      EXPECT_EQ(compressor.last_sent_elements(), 2 * (24 + 40));
      EXPECT_EQ(compressor.last_compressed_elements(), 24 * 40);
      EXPECT_EQ(compressor.last_allreduces(), 2);
    }
  });
}

// Enough matrices that their factors travel in several chunks per dtype, in
// two dtypes: each rank's gradients are of rank one, so rank 3 at 3 ranks
// recovers every matrix's average, whichever chunk carried it.
TEST(PowerSGD, ManyMatricesTravelInChunksAndStayExact) {
  kolo::testing::run_ranks(3, [](int rank) {
    RankSession session;
    PowerSGDOptions options;
    options.rank = 3;
    options.min_size = 0;
    PowerSGD compressor(options);
    compressor.bind(CompressorBinding{});
    // 8192 x 16 at rank 3: 24624 factor elements each, 10 of them in doubles
    // (past two chunks' worth) and 3 in floats (one chunk).
    constexpr std::int64_t kRows = 8192;
    constexpr std::int64_t kCols = 16;
    struct Matrix {
      std::string name;
      at::ScalarType dtype;
    };
    std::vector<Matrix> matrices;
    for (int i = 0; i < 10; ++i) matrices.push_back({"double" + std::to_string(i), at::kDouble});
    for (int i = 0; i < 3; ++i) matrices.push_back({"float" + std::to_string(i), at::kFloat});
    auto rank_one = [&](std::size_t matrix, int r) {
      at::manual_seed(1000 * matrix + r);
      return at::outer(at::randn({kRows}, at::kDouble), at::randn({kCols}, at::kDouble));
    };
    std::vector<at::Tensor> grads;
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      grads.push_back(rank_one(i, rank).to(matrices[i].dtype));
      compressor.add(matrices[i].name, grads.back());
    }
    compressor.finish();
    for (std::size_t i = 0; i < matrices.size(); ++i) {
      at::Tensor mean = at::zeros({kRows, kCols}, at::kDouble);
      for (int r = 0; r < kolo::size(); ++r) mean += rank_one(i, r).to(matrices[i].dtype).to(at::kDouble);
      mean /= kolo::size();
      const double tolerance = matrices[i].dtype == at::kDouble ? 1e-9 : 1e-4;
      EXPECT_LE(relative_error(grads[i].to(at::kDouble), mean), tolerance) << matrices[i].name;
      expect_identical_on_all_ranks(grads[i], "check." + matrices[i].name);
    }
    EXPECT_EQ(compressor.last_sent_elements(), 13 * 3 * (kRows + kCols));
    EXPECT_EQ(compressor.last_allreduces(), 2 * (3 + 1));  // three chunks of doubles, one of floats
  });
}

TEST(PowerSGD, SmallOneDimensionalAndWideRankGradientsTravelWhole) {
  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    PowerSGDOptions options;
    options.rank = 4;
    options.min_size = 1000;
    PowerSGD compressor(options);
    EXPECT_TRUE(compressor.takes(at::zeros({40, 40})));
    EXPECT_FALSE(compressor.takes(at::zeros({1600})));  // a bias
    EXPECT_FALSE(compressor.takes(at::zeros({30, 30})));  // below min_size
    EXPECT_FALSE(compressor.takes(at::zeros({40, 40}, at::kHalf)));
    EXPECT_TRUE(compressor.takes(at::zeros({16, 8, 3, 3})));  // a convolution: 16 x 72
    options.rank = 50;  // past the 40 x 40 matrix's sides: its factors would not be smaller
    EXPECT_FALSE(PowerSGD(options).takes(at::zeros({40, 40})));
    options.rank = 4;
    options.start_step = 2;
    PowerSGD later(options);
    later.bind(CompressorBinding{});
    EXPECT_FALSE(later.takes(at::zeros({40, 40})));
    later.finish();
    later.finish();
    EXPECT_TRUE(later.takes(at::zeros({40, 40})));
    EXPECT_THROW(later.add("bias", at::zeros({40})), InvalidArgumentError);
  });
}

TEST(PowerSGD, BadSettingsAreNamed) {
  auto settings = [](int rank, std::int64_t start, std::int64_t min_size) {
    PowerSGDOptions options;
    options.rank = rank;
    options.start_step = start;
    options.min_size = min_size;
    return options;
  };
  EXPECT_THROW(PowerSGD(settings(0, 0, 0)), InvalidArgumentError);
  EXPECT_THROW(PowerSGD(settings(2, -1, 0)), InvalidArgumentError);
  EXPECT_THROW(PowerSGD(settings(2, 0, -5)), InvalidArgumentError);

  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    auto model = make_net(1);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizerOptions options;
    options.compressor = powersgd(2);
    options.compression = kolo::torch::Compression::FP16;
    EXPECT_THROW(DistributedOptimizer(sgd, model->named_parameters(), options), InvalidArgumentError);
    options.compression = kolo::torch::Compression::None;
    options.gradient_predivide_factor = 2.0;
    EXPECT_THROW(DistributedOptimizer(sgd, model->named_parameters(), options), InvalidArgumentError);
    options.gradient_predivide_factor = 1.0;
    DistributedOptimizer first(sgd, model->named_parameters(), options);
    // One compressor, one optimizer: its memory is that optimizer's gradients'.
    EXPECT_THROW(DistributedOptimizer(sgd, model->named_parameters(), options), InvalidArgumentError);
  });
}

// Ranks whose compressors differ fail on every rank with both settings named,
// in the first step, without a hang.
TEST(PowerSGD, RanksWithDifferentSettingsFailClearly) {
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    auto model = make_net(3);
    DistributedOptimizerOptions options;
    options.compressor = powersgd(rank == 0 ? 4 : 2);
    DistributedOptimizer optimizer(
        std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1)),
        model->named_parameters(), options);
    auto [x, y] = global_batch(0, 2);
    at::mse_loss(model->forward(x), y).backward();
    try {
      optimizer.step();
      ADD_FAILURE() << "rank " << rank << ": no error";
    } catch (const InvalidArgumentError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("rank 0 has 'powersgd rank=4"), std::string::npos) << message;
      EXPECT_NE(message.find("rank 1 has 'powersgd rank=2"), std::string::npos) << message;
    }
  });
}

// memory() and load_memory() carry a compressor across a restart: the steps
// after a restore are bitwise those of a run that never stopped.
TEST(PowerSGD, MemoryCarriesTheStateAcrossARestore) {
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    auto step_once = [&](PowerSGD& compressor, int step) {
      at::manual_seed(10 * step + rank);
      at::Tensor grad = at::randn({30, 20}, at::kDouble);
      compressor.add("w", grad);
      compressor.finish();
      return grad;
    };
    PowerSGD straight(PowerSGDOptions{2, 0, 0, true, true, 5});
    straight.bind(CompressorBinding{});
    PowerSGD restarted(PowerSGDOptions{2, 0, 0, true, true, 5});
    restarted.bind(CompressorBinding{});
    for (int step = 0; step < 3; ++step) {
      step_once(straight, step);
      step_once(restarted, step);
    }
    const auto saved = straight.memory();
    std::vector<std::pair<std::string, at::Tensor>> copy;
    for (const auto& [name, tensor] : saved) copy.emplace_back(name, tensor.clone());
    step_once(restarted, 99);  // a step that a failure undoes
    restarted.load_memory(copy);
    EXPECT_EQ(restarted.steps(), 3);
    for (int step = 3; step < 5; ++step) {
      EXPECT_TRUE(at::equal(step_once(straight, step), step_once(restarted, step))) << "step " << step;
    }
    EXPECT_THROW(restarted.load_memory({{"bogus", at::zeros({1})}}), InvalidArgumentError);
  });
}

// A step added but never finished (zero_grad() after backward, a failure)
// leaves the error feedback as it was, to rounding.
TEST(PowerSGD, AnAbandonedStepLeavesTheErrorFeedback) {
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    auto grad = [&](int step) {
      at::manual_seed(31 * step + rank);
      return at::randn({30, 20}, at::kDouble);
    };
    PowerSGD straight(PowerSGDOptions{2, 0, 0, true, true, 9});
    straight.bind(CompressorBinding{});
    PowerSGD interrupted(PowerSGDOptions{2, 0, 0, true, true, 9});
    interrupted.bind(CompressorBinding{});
    for (int step = 0; step < 2; ++step) {
      at::Tensor a = grad(step);
      straight.add("w", a);
      straight.finish();
      at::Tensor b = grad(step);
      interrupted.add("w", b);
      interrupted.finish();
    }
    interrupted.add("w", grad(50));
    interrupted.abandon();
    at::Tensor a = grad(2);
    straight.add("w", a);
    straight.finish();
    at::Tensor b = grad(2);
    interrupted.add("w", b);
    interrupted.finish();
    EXPECT_LE(relative_error(b, a), 1e-12);
    EXPECT_EQ(interrupted.steps(), 3);
  });
}

// An elastic state commits the compressor's memory with the model: a restore
// undoes a step's error feedback too, and a sync leaves every rank with rank
// 0's step count and factors and its own error feedback.
TEST(PowerSGD, TorchStateCommitsRestoresAndSyncsItsMemory) {
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    auto model = make_net(5);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.05));
    auto compressor = powersgd(1);
    DistributedOptimizerOptions options;
    options.compressor = compressor;
    DistributedOptimizer optimizer(sgd, model->named_parameters(), options);
    kolo::torch::elastic::TorchState state(model.ptr(), sgd);
    state.add_compressor(compressor);
    EXPECT_THROW(state.add_compressor(compressor), InvalidArgumentError);
    auto step = [&](int index) {
      auto [x, y] = global_batch(index, 2 * kRowsForState);
      optimizer.zero_grad();
      at::mse_loss(model->forward(x.narrow(0, rank * kRowsForState, kRowsForState)),
                   y.narrow(0, rank * kRowsForState, kRowsForState))
          .backward();
      optimizer.step();
    };
    step(0);
    step(1);
    state.commit();
    auto committed = compressor->memory();
    for (auto& [name, tensor] : committed) tensor = tensor.clone();
    step(2);
    state.restore();
    const auto restored = compressor->memory();
    ASSERT_EQ(restored.size(), committed.size());
    for (std::size_t i = 0; i < committed.size(); ++i) {
      EXPECT_EQ(restored[i].first, committed[i].first);
      EXPECT_TRUE(at::equal(restored[i].second, committed[i].second)) << restored[i].first;
    }
    EXPECT_EQ(compressor->steps(), 2);
    state.sync();
    for (const auto& [name, tensor] : compressor->memory()) {
      if (name.rfind("local.", 0) != 0) expect_identical_on_all_ranks(tensor, "check.memory." + name);
    }
    step(3);  // training goes on from the synced state
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params.after");
  });
}

}  // namespace
}  // namespace kolo_torch_testing
