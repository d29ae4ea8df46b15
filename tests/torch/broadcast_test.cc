// broadcast_parameters, broadcast_optimizer_state and broadcast_object across real
// processes, and the metric helpers.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <string>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"
#include "kolo/torch/broadcast.h"
#include "kolo/torch/collectives.h"
#include "kolo/torch/metrics.h"
#include "support.h"

namespace kolo_torch_testing {
namespace {

using kolo::AllreduceOptions;
using kolo::CollectiveOptions;
using kolo::DataType;
using kolo::InvalidArgumentError;
using kolo::MismatchError;
using kolo::ReduceOp;

namespace kt = kolo::torch;

struct NormNetImpl : ::torch::nn::Module {
  NormNetImpl()
      : fc(register_module("fc", ::torch::nn::Linear(3, 4))),
        norm(register_module("norm", ::torch::nn::BatchNorm1d(4))) {}
  at::Tensor forward(const at::Tensor& x) { return norm->forward(fc->forward(x)); }
  ::torch::nn::Linear fc;
  ::torch::nn::BatchNorm1d norm;
};
TORCH_MODULE(NormNet);

// A model whose parameters and batch-norm statistics depend on the seed.
NormNet seeded_model(int seed) {
  at::manual_seed(seed);
  NormNet model;
  model->train();
  model->forward(at::randn({8, 3}));  // moves the running statistics away from their defaults
  return model;
}

std::vector<at::Tensor> state_of(const ::torch::nn::Module& module) {
  std::vector<at::Tensor> tensors = module.parameters();
  for (const auto& buffer : module.buffers()) tensors.push_back(buffer);
  return tensors;
}

void expect_same_state(const ::torch::nn::Module& actual, const ::torch::nn::Module& expected) {
  auto a = state_of(actual);
  auto e = state_of(expected);
  ASSERT_EQ(a.size(), e.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], e[i])) << "tensor " << i;
}

class TorchBroadcastTest : public ::testing::TestWithParam<int> {};

TEST_P(TorchBroadcastTest, ParametersAndBuffersComeFromRoot) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int root = kolo::size() - 1;
    NormNet model = seeded_model(10 + rank);
    kt::broadcast_parameters(*model, root);
    expect_same_state(*model, *seeded_model(10 + root));
    // Parameters keep working with autograd after being overwritten in place.
    model->forward(at::randn({4, 3})).sum().backward();
    EXPECT_TRUE(model->fc->weight.grad().defined());
  });
}

TEST_P(TorchBroadcastTest, NamedTensorsIncludingNonContiguous) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    at::Tensor matrix = at::full({3, 2}, rank, at::kFloat);
    at::Tensor transposed = at::full({2, 3}, rank, at::kDouble).t();
    kt::broadcast_parameters(kt::NamedParameters{{"matrix", matrix}, {"transposed", transposed}}, 0, "named");
    EXPECT_TRUE(at::equal(matrix, at::zeros({3, 2}, at::kFloat)));
    EXPECT_TRUE(at::equal(transposed, at::zeros({3, 2}, at::kDouble)));
  });
}

std::shared_ptr<::torch::optim::Adam> trained_adam(::torch::nn::Module& model, double lr, int steps) {
  auto adam = std::make_shared<::torch::optim::Adam>(model.parameters(), ::torch::optim::AdamOptions(lr));
  for (int i = 0; i < steps; ++i) {
    adam->zero_grad();
    for (auto& parameter : model.parameters()) parameter.mutable_grad() = at::ones_like(parameter) * (i + 1);
    adam->step();
  }
  return adam;
}

TEST_P(TorchBroadcastTest, OptimizerStateAndOptionsComeFromRoot) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int root = kolo::size() > 1 ? 1 : 0;
    NormNet model = seeded_model(1);
    // Root has stepped three times with lr 0.5; the others are fresh (no state yet)
    // or have state of their own that must not survive.
    auto adam = trained_adam(*model, rank == root ? 0.5 : 0.1, rank == root ? 3 : rank);
    kt::broadcast_parameters(*model, root);
    kt::broadcast_optimizer_state(*adam, root);

    EXPECT_DOUBLE_EQ(adam->param_groups()[0].options().get_lr(), 0.5);
    for (const auto& parameter : model->parameters()) {
      auto key = c10::guts::to_string(parameter.unsafeGetTensorImpl());
      ASSERT_TRUE(adam->state().count(key)) << "missing state after broadcast";
      const auto& state = static_cast<const ::torch::optim::AdamParamState&>(*adam->state().at(key));
      EXPECT_EQ(state.step(), 3);
      expect_identical_on_all_ranks(state.exp_avg(), "check.exp_avg");
      expect_identical_on_all_ranks(state.exp_avg_sq(), "check.exp_avg_sq");
    }
    // The same gradients now give the same parameters everywhere.
    adam->zero_grad();
    for (auto& parameter : model->parameters()) parameter.mutable_grad() = at::ones_like(parameter);
    adam->step();
    expect_identical_on_all_ranks(flat_parameters(*model), "check.params");
  });
}

TEST_P(TorchBroadcastTest, OptimizerStructureMismatchIsAnError) {
  if (GetParam() < 2) GTEST_SKIP() << "needs two ranks";
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    NormNet model = seeded_model(1);
    std::vector<at::Tensor> params = model->parameters();
    if (rank != 0) params.pop_back();  // one parameter fewer than root's optimizer
    ::torch::optim::SGD sgd(params, ::torch::optim::SGDOptions(0.1).momentum(0.9));
    if (rank == 0) {
      kt::broadcast_optimizer_state(sgd, 0);
    } else {
      EXPECT_THROW(kt::broadcast_optimizer_state(sgd, 0), MismatchError);
    }
  });
}

TEST_P(TorchBroadcastTest, ObjectsAndBytes) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    c10::impl::GenericDict config(c10::StringType::get(), c10::AnyType::get());
    if (rank == 0) {
      config.insert("epochs", c10::IValue(int64_t{7}));
      config.insert("name", c10::IValue(std::string("resnet")));
      config.insert("weights", c10::IValue(at::arange(5, at::kFloat)));
    }
    c10::IValue received = kt::broadcast_object(c10::IValue(config), 0);
    auto dict = received.toGenericDict();
    EXPECT_EQ(dict.at("epochs").toInt(), 7);
    EXPECT_EQ(dict.at("name").toStringRef(), "resnet");
    EXPECT_TRUE(at::equal(dict.at("weights").toTensor(), at::arange(5, at::kFloat)));

    const int root = kolo::size() - 1;
    std::string big(100000 + 17, static_cast<char>('a' + rank));
    EXPECT_EQ(kt::broadcast_bytes(big, root, "big"), std::string(100017, static_cast<char>('a' + root)));
    EXPECT_EQ(kt::broadcast_bytes(rank == root ? "" : "ignored", root, "empty"), "");
    EXPECT_EQ(kt::broadcast_object(c10::IValue(rank * 1.5), root, "number").toDouble(), root * 1.5);
  });
}

TEST_P(TorchBroadcastTest, MetricsAverageOverRanks) {
  kolo::testing::run_ranks(GetParam(), [](int rank) {
    RankSession session;
    const int size = kolo::size();
    EXPECT_DOUBLE_EQ(kt::average_metric(rank, "loss"), (size - 1) / 2.0);
    kt::MetricAverage accuracy;
    EXPECT_EQ(accuracy.local(), 0.0);
    // Rank r saw r + 1 batches of 10 samples, all with accuracy r / 10.
    for (int i = 0; i <= rank; ++i) accuracy.update(rank / 10.0, 10);
    EXPECT_DOUBLE_EQ(accuracy.local(), rank / 10.0);
    double weighted = 0, count = 0;
    for (int r = 0; r < size; ++r) {
      weighted += r / 10.0 * (r + 1) * 10;
      count += (r + 1) * 10;
    }
    EXPECT_NEAR(accuracy.global("accuracy"), weighted / count, 1e-12);
    accuracy.reset();
    EXPECT_EQ(accuracy.global("empty"), 0.0);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TorchBroadcastTest, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace kolo_torch_testing
