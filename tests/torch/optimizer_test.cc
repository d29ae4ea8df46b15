// DistributedOptimizer across real processes: N workers with batch B must follow
// one worker with batch N*B, and stay bitwise identical to each other.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/optimizer.h"
#include "support.h"

namespace kolo_torch_testing {
namespace {

using kolo::AllreduceOptions;
using kolo::CollectiveOptions;
using kolo::DataType;
using kolo::InvalidArgumentError;
using kolo::MismatchError;
using kolo::ReduceOp;

using kolo::torch::Compression;
using kolo::torch::DistributedOptimizer;
using kolo::torch::DistributedOptimizerOptions;

constexpr int kInputs = 4;
constexpr int kHidden = 8;
constexpr int kOutputs = 3;
constexpr int kBatchPerRank = 4;

// Two layers whose dtypes may differ, so that one model carries mixed gradients.
struct TinyNetImpl : ::torch::nn::Module {
  TinyNetImpl(c10::ScalarType first, c10::ScalarType second)
      : fc1(register_module("fc1", ::torch::nn::Linear(kInputs, kHidden))),
        fc2(register_module("fc2", ::torch::nn::Linear(kHidden, kOutputs))) {
    fc1->to(first);
    fc2->to(second);
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor hidden = at::tanh(fc1->forward(x.to(fc1->weight.scalar_type())));
    return fc2->forward(hidden.to(fc2->weight.scalar_type())).to(at::kDouble);
  }
  ::torch::nn::Linear fc1;
  ::torch::nn::Linear fc2;
};
TORCH_MODULE(TinyNet);

enum class OptimizerKind { SGD, Adam };

std::shared_ptr<::torch::optim::Optimizer> make_optimizer(OptimizerKind kind, std::vector<at::Tensor> params) {
  if (kind == OptimizerKind::SGD) {
    return std::make_shared<::torch::optim::SGD>(params, ::torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  return std::make_shared<::torch::optim::Adam>(params, ::torch::optim::AdamOptions(0.01));
}

struct TrainSetup {
  OptimizerKind kind = OptimizerKind::SGD;
  int passes = 1;  // backward passes per step
  DistributedOptimizerOptions options;
  c10::ScalarType first = at::kDouble;
  c10::ScalarType second = at::kDouble;
  double tolerance = 1e-5;
  // Scale the distributed workers' gradients by this before step() (between an
  // explicit synchronize() and step()), and the reference's loss alike.
  double clip_factor = 1.0;
  int steps = 5;
};

// The samples of one step: every rank draws the same global batch and takes its part.
std::pair<at::Tensor, at::Tensor> global_batch(int step, int rows) {
  at::manual_seed(1000 + step);
  return {at::randn({rows, kInputs}, at::kDouble), at::randn({rows, kOutputs}, at::kDouble)};
}

void train_and_compare(const TrainSetup& setup) {
  RankSession session;
  const int size = kolo::size();
  const int rank = kolo::rank();
  at::manual_seed(7);
  TinyNet model(setup.first, setup.second);
  at::manual_seed(7);
  TinyNet reference(setup.first, setup.second);

  DistributedOptimizer optimizer(make_optimizer(setup.kind, model->parameters()), model->named_parameters(),
                                 setup.options);
  auto reference_optimizer = make_optimizer(setup.kind, reference->parameters());
  // With Sum the workers' gradients add up to size times the mean gradient.
  const double reference_scale = (setup.options.op == ReduceOp::Sum ? size : 1) * setup.clip_factor;

  for (int step = 0; step < setup.steps; ++step) {
    const int rows = setup.passes * size * kBatchPerRank;
    auto [x, y] = global_batch(step, rows);

    optimizer.zero_grad();
    for (int pass = 0; pass < setup.passes; ++pass) {
      const int offset = (pass * size + rank) * kBatchPerRank;
      at::Tensor local_x = x.narrow(0, offset, kBatchPerRank);
      at::Tensor local_y = y.narrow(0, offset, kBatchPerRank);
      at::Tensor loss = at::mse_loss(model->forward(local_x), local_y) / setup.passes;
      loss.backward();
    }
    if (setup.clip_factor != 1.0) {
      optimizer.synchronize();
      for (auto& parameter : model->parameters()) parameter.mutable_grad().mul_(setup.clip_factor);
    }
    optimizer.step();

    reference_optimizer->zero_grad();
    (at::mse_loss(reference->forward(x), y) * reference_scale).backward();
    reference_optimizer->step();

    const double error = relative_error(flat_parameters(*model), flat_parameters(*reference));
    EXPECT_LE(error, setup.tolerance) << "step " << step << " on rank " << rank;
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params." + std::to_string(step));
  }
}

class DistributedOptimizerTest : public ::testing::TestWithParam<int> {
 protected:
  void run(const TrainSetup& setup) {
    kolo::testing::run_ranks(GetParam(), [&](int) { train_and_compare(setup); });
  }
};

TEST_P(DistributedOptimizerTest, SgdMatchesOneWorkerWithTheWholeBatch) { run(TrainSetup{}); }

TEST_P(DistributedOptimizerTest, AdamMatchesOneWorkerWithTheWholeBatch) {
  TrainSetup setup;
  setup.kind = OptimizerKind::Adam;
  run(setup);
}

TEST_P(DistributedOptimizerTest, SgdWithBackwardPassesPerStep) {
  TrainSetup setup;
  setup.passes = 3;
  setup.options.backward_passes_per_step = 3;
  run(setup);
}

TEST_P(DistributedOptimizerTest, AdamWithBackwardPassesPerStep) {
  TrainSetup setup;
  setup.kind = OptimizerKind::Adam;
  setup.passes = 2;
  setup.options.backward_passes_per_step = 2;
  run(setup);
}

TEST_P(DistributedOptimizerTest, SumAddsTheWorkersGradients) {
  TrainSetup setup;
  setup.options.op = ReduceOp::Sum;
  run(setup);
}

TEST_P(DistributedOptimizerTest, GradientPredivideFactorKeepsTheAverage) {
  TrainSetup setup;
  setup.kind = OptimizerKind::Adam;
  setup.options.gradient_predivide_factor = 4.0;
  run(setup);
}

TEST_P(DistributedOptimizerTest, Fp16CompressionStaysCloseAndIdentical) {
  TrainSetup setup;
  setup.options.compression = Compression::FP16;
  setup.first = setup.second = at::kFloat;
  setup.tolerance = 2e-3;
  run(setup);
}

TEST_P(DistributedOptimizerTest, Bf16CompressionStaysCloseAndIdentical) {
  TrainSetup setup;
  setup.options.compression = Compression::BF16;
  setup.first = setup.second = at::kFloat;
  setup.tolerance = 2e-2;
  run(setup);
}

TEST_P(DistributedOptimizerTest, MixedParameterDtypes) {
  TrainSetup setup;
  setup.first = at::kFloat;
  setup.second = at::kDouble;
  setup.tolerance = 1e-4;
  run(setup);
}

TEST_P(DistributedOptimizerTest, StepAfterSynchronizeDoesNotReduceAgain) {
  // With Sum a second reduction would multiply the gradients by the worker count.
  TrainSetup setup;
  setup.options.op = ReduceOp::Sum;
  setup.clip_factor = 0.5;
  run(setup);
}

// A model with one parameter only rank 0 uses and one nobody uses.
struct PartlyUsedNetImpl : ::torch::nn::Module {
  PartlyUsedNetImpl()
      : fc(register_module("fc", ::torch::nn::Linear(kInputs, kOutputs))),
        only_rank0(register_parameter("only_rank0", at::ones({kOutputs}, at::kDouble))),
        unused(register_parameter("unused", at::ones({2}, at::kDouble))) {
    fc->to(at::kDouble);
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor out = fc->forward(x);
    return kolo::rank() == 0 ? out * only_rank0 : out;
  }
  ::torch::nn::Linear fc;
  at::Tensor only_rank0;
  at::Tensor unused;
};
TORCH_MODULE(PartlyUsedNet);

TEST_P(DistributedOptimizerTest, ParametersWithoutGradientDoNotHang) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    at::manual_seed(3);
    PartlyUsedNet model;
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer optimizer(sgd, model->named_parameters());
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      auto [x, y] = global_batch(step, kBatchPerRank);
      at::mse_loss(model->forward(x), y).backward();

      // What the average of only_rank0's gradient must be: rank 0's own / size.
      at::Tensor local = rank == 0 ? model->only_rank0.grad().clone() : at::zeros({kOutputs}, at::kDouble);
      at::Tensor expected = kolo::torch::allreduce(local, {ReduceOp::Average, 1.0, 1.0, "check.expected"});

      optimizer.synchronize();
      ASSERT_TRUE(model->unused.grad().defined());
      EXPECT_TRUE(at::equal(model->unused.grad(), at::zeros({2}, at::kDouble)));
      EXPECT_LE(relative_error(model->only_rank0.grad(), expected), 1e-12);
      optimizer.step();
      expect_identical_on_all_ranks(flat_parameters(*model), "check.params." + std::to_string(step));
    }
  });
}

// On shared memory, after the first step every gradient lies in one
// shareable bucket per dtype (past 1 MiB here: reduced in place of the ranks'
// buckets), and training still follows one worker with the whole batch. A
// gradient reset to undefined moves back into its place; the wrapped optimizer's
// own zero_grad() works on them.
TEST_P(DistributedOptimizerTest, GradientsLiveInOneBucketAfterTheFirstStep) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    auto make = [] {
      at::manual_seed(11);
      auto net = ::torch::nn::Sequential(::torch::nn::Linear(kInputs, 600), ::torch::nn::Tanh(),
                                         ::torch::nn::Linear(600, 300), ::torch::nn::Tanh(),
                                         ::torch::nn::Linear(300, kOutputs));
      net->to(at::kDouble);
      return net;
    };
    auto model = make();
    auto reference = make();
    DistributedOptimizer optimizer(make_optimizer(OptimizerKind::SGD, model->parameters()),
                                   model->named_parameters());
    auto reference_optimizer = make_optimizer(OptimizerKind::SGD, reference->parameters());
    for (int step = 0; step < 4; ++step) {
      auto [x, y] = global_batch(step, size * kBatchPerRank);
      // The wrapped optimizer's own zero_grad() (which detaches in place) works on them too.
      if (step == 1) {
        optimizer.optimizer().zero_grad();
      } else {
        optimizer.zero_grad();
      }
      if (step == 2) {
        for (auto& p : model->parameters()) p.mutable_grad() = at::Tensor();
      }
      at::mse_loss(model->forward(x.narrow(0, rank * kBatchPerRank, kBatchPerRank)),
                   y.narrow(0, rank * kBatchPerRank, kBatchPerRank))
          .backward();
      optimizer.step();
      reference_optimizer->zero_grad();
      at::mse_loss(reference->forward(x), y).backward();
      reference_optimizer->step();

      EXPECT_LE(relative_error(flat_parameters(*model), flat_parameters(*reference)), 1e-9) << "step " << step;
      if (kolo::backend() == "shm") {
        std::set<const void*> storages;
        for (auto& p : model->parameters()) storages.insert(p.grad().storage().data());
        EXPECT_EQ(storages.size(), 1u) << "step " << step;
      }
    }
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params");
  });
}

TEST_P(DistributedOptimizerTest, AllreducesStartDuringBackward) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    auto [x, y] = global_batch(rank, kBatchPerRank);  // every rank its own data
    at::manual_seed(7);
    TinyNet reference(at::kDouble, at::kDouble);
    at::mse_loss(reference->forward(x), y).backward();
    std::vector<at::Tensor> expected;
    for (const auto& parameter : reference->parameters()) {
      expected.push_back(kolo::torch::allreduce(parameter.grad(), {ReduceOp::Average, 1.0, 1.0, ""}));
    }

    at::manual_seed(7);
    TinyNet model(at::kDouble, at::kDouble);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer optimizer(sgd, model->named_parameters());
    at::mse_loss(model->forward(x), y).backward();
    // Without synchronize() or step(), the averages arrive in the gradients by
    // themselves: the hooks started the allreduces.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    auto averaged = [&] {
      auto parameters = model->parameters();
      for (std::size_t i = 0; i < parameters.size(); ++i) {
        if (!at::allclose(parameters[i].grad(), expected[i], 1e-12, 1e-12)) return false;
      }
      return true;
    };
    while (!averaged() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(averaged()) << "gradients were not averaged before step()";
    optimizer.step();
  });
}

TEST_P(DistributedOptimizerTest, NamesFollowTheParameterNames) {
  kolo::testing::run_ranks(GetParam(), [](int) {
    RankSession session;
    TinyNet model(at::kDouble, at::kDouble);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizerOptions options;
    options.name_prefix = "net";
    DistributedOptimizer optimizer(sgd, model->named_parameters(), options);
    EXPECT_EQ(optimizer.operation_names(),
              (std::vector<std::string>{"net.fc1.weight", "net.fc1.bias", "net.fc2.weight", "net.fc2.bias"}));
  });
}

TEST_P(DistributedOptimizerTest, TooManyBackwardPassesIsAnError) {
  kolo::testing::run_ranks(GetParam(), [](int) {
    RankSession session;
    at::manual_seed(7);
    TinyNet model(at::kDouble, at::kDouble);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer optimizer(sgd, model->named_parameters());
    auto [x, y] = global_batch(0, kBatchPerRank);
    at::mse_loss(model->forward(x), y).backward();
    try {
      at::mse_loss(model->forward(x), y).backward();
      ADD_FAILURE() << "a second backward pass before step() was accepted";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("backward_passes_per_step"), std::string::npos) << e.what();
    }
    // The job is still usable: the first gradients complete.
    optimizer.step();
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params");
  });
}

// Parameter-server mode (comm/ps): the same equivalence with every gradient
// reduced through two kolo-server processes, in partitions small enough that
// each step's gradients cross both servers.
class DistributedOptimizerThroughServersTest : public ::testing::TestWithParam<int> {
 protected:
  void run(const TrainSetup& setup) {
    kolo::testing::SpawnOptions options;
    options.servers = 2;
    options.env["KOLO_PS_PARTITION_BYTES"] = "4096";
    kolo::testing::run_ranks(GetParam(), [&](int) { train_and_compare(setup); }, options);
  }
};

TEST_P(DistributedOptimizerThroughServersTest, SgdMatchesOneWorkerWithTheWholeBatch) { run(TrainSetup{}); }

TEST_P(DistributedOptimizerThroughServersTest, AdamWithBackwardPassesPerStep) {
  TrainSetup setup;
  setup.kind = OptimizerKind::Adam;
  setup.passes = 2;
  setup.options.backward_passes_per_step = 2;
  run(setup);
}

TEST_P(DistributedOptimizerThroughServersTest, Fp16CompressionStaysCloseAndIdentical) {
  TrainSetup setup;
  setup.options.compression = Compression::FP16;
  setup.first = setup.second = at::kFloat;
  setup.tolerance = 2e-3;
  run(setup);
}

INSTANTIATE_TEST_SUITE_P(Workers, DistributedOptimizerThroughServersTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

INSTANTIATE_TEST_SUITE_P(Ranks, DistributedOptimizerTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(DistributedOptimizerOptionsTest, InvalidOptionsAreRejected) {
  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    TinyNet model(at::kDouble, at::kDouble);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    auto expect_rejected = [&](DistributedOptimizerOptions options, const char* what) {
      EXPECT_THROW(DistributedOptimizer(sgd, model->named_parameters(), options), InvalidArgumentError) << what;
    };
    DistributedOptimizerOptions options;
    options.backward_passes_per_step = 0;
    expect_rejected(options, "zero passes");
    options = {};
    options.op = ReduceOp::Max;
    expect_rejected(options, "max");
    options = {};
    options.gradient_predivide_factor = 0.0;
    expect_rejected(options, "zero predivide");
    options = {};
    options.op = ReduceOp::Sum;
    options.gradient_predivide_factor = 2.0;
    expect_rejected(options, "predivide with sum");
    EXPECT_THROW(DistributedOptimizer(nullptr, model->named_parameters()), InvalidArgumentError);
    kolo::torch::NamedParameters duplicate = {{"same", model->fc1->weight}, {"same", model->fc2->weight}};
    EXPECT_THROW(DistributedOptimizer(sgd, duplicate), InvalidArgumentError);
    EXPECT_THROW(kolo::torch::parse_compression("zip"), InvalidArgumentError);
    EXPECT_EQ(kolo::torch::parse_compression("bf16"), Compression::BF16);
  });
}

TEST(DistributedOptimizerOptionsTest, UnnamedParametersAreNamedByPosition) {
  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    TinyNet model(at::kDouble, at::kDouble);
    auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1));
    DistributedOptimizer optimizer(sgd, kolo::torch::NamedParameters{{"w", model->fc1->weight}});
    EXPECT_EQ(optimizer.operation_names(), (std::vector<std::string>{"kolo.grad.w", "kolo.grad.group0.param1",
                                                                     "kolo.grad.group0.param2",
                                                                     "kolo.grad.group0.param3"}));
  });
}

}  // namespace
}  // namespace kolo_torch_testing
