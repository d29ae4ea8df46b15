// kolo::torch::elastic: ElasticSampler's splits (ranks simulated by index),
// TorchState's commit, restore and sync across real processes, and both in an
// elastic job under kolorun that loses workers mid-epoch.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/sgd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "harness/multiprocess.h"
#include "harness/subprocess.h"
#include "harness/time_bound.h"
#include "kolo/kolo.h"
#include "kolo/torch/elastic.h"
#include "kolo/torch/metrics.h"
#include "kolo/torch/optimizer.h"
#include "kolo/torch/sampler.h"
#include "support.h"

#ifndef KOLORUN_PATH
#error "tests/torch/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

namespace kolo_torch_testing {
namespace {

using kolo::InvalidArgumentError;
using kolo::MismatchError;
using kolo::torch::elastic::ElasticSampler;
using kolo::torch::elastic::ElasticSamplerOptions;
using kolo::torch::elastic::TorchState;

using Mask = std::vector<std::uint8_t>;

// ---------------------------------------------------------------------------
// ElasticSampler, ranks simulated by index.

std::vector<ElasticSampler> samplers_for(std::size_t n, int size, std::uint64_t epoch, const Mask& processed,
                                         ElasticSamplerOptions options = {}) {
  std::vector<ElasticSampler> samplers;
  for (int r = 0; r < size; ++r) {
    samplers.emplace_back(n, size, r, options);
    samplers.back().load(epoch, processed);
  }
  return samplers;
}

TEST(ElasticSamplerTest, AFreshEpochIsDistributedSamplersShard) {
  for (std::size_t n : {0u, 1u, 7u, 10u, 100u}) {
    for (int size : {1, 2, 3, 4}) {
      for (bool shuffle : {true, false}) {
        for (int r = 0; r < size; ++r) {
          ElasticSampler sampler(n, size, r, {.shuffle = shuffle, .seed = 5});
          sampler.set_epoch(3);
          EXPECT_EQ(sampler.indices(),
                    kolo::torch::shard_indices(n, size, r, 3, {.shuffle = shuffle, .seed = 5}))
              << "n=" << n << " size=" << size << " rank=" << r;
          EXPECT_EQ(sampler.num_remaining(), n);
        }
      }
    }
  }
}

TEST(ElasticSamplerTest, SharesAreEqualAndCoverExactlyWhatRemains) {
  const std::size_t n = 50;
  Mask processed(n, 0);
  for (std::size_t i : {0u, 3u, 4u, 17u, 49u}) processed[i] = 1;
  for (int size = 1; size <= 7; ++size) {
    auto samplers = samplers_for(n, size, 2, processed);
    std::set<std::size_t> seen;
    std::size_t total = 0;
    for (const auto& sampler : samplers) {
      EXPECT_EQ(sampler.num_samples(), samplers[0].num_samples()) << "equal shares at size " << size;
      EXPECT_EQ(sampler.num_remaining(), n - 5);
      for (std::size_t index : sampler.indices()) EXPECT_FALSE(processed[index]) << index << " was processed";
      seen.insert(sampler.indices().begin(), sampler.indices().end());
      total += sampler.num_samples();
    }
    EXPECT_EQ(seen.size(), n - 5) << "every remaining index, at size " << size;
    EXPECT_LT(total - (n - 5), static_cast<std::size_t>(size)) << "padding is less than one index per rank";
  }
}

TEST(ElasticSamplerTest, OneOrderPerEpochWhateverTheSize) {
  const std::size_t n = 23;
  // Interleaving the shares of any size gives the epoch's order (before padding).
  auto order_at = [&](int size, std::uint64_t epoch, ElasticSamplerOptions options) {
    auto samplers = samplers_for(n, size, epoch, Mask(n, 0), options);
    std::vector<std::size_t> order;
    for (std::size_t k = 0; order.size() < n; ++k) {
      for (int r = 0; r < size && order.size() < n; ++r) order.push_back(samplers[r].indices()[k]);
    }
    return order;
  };
  const auto order = order_at(1, 4, {});
  for (int size : {2, 3, 5}) EXPECT_EQ(order_at(size, 4, {}), order) << "size " << size;
  EXPECT_NE(order_at(1, 5, {}), order) << "another epoch, another order";
  EXPECT_NE(order_at(1, 4, {.seed = 9}), order) << "another seed, another order";
  std::vector<std::size_t> identity(n);
  for (std::size_t i = 0; i < n; ++i) identity[i] = i;
  EXPECT_EQ(order_at(3, 4, {.shuffle = false}), identity);
}

TEST(ElasticSamplerTest, RecordingAndMergingDoNotSplitAgain) {
  ElasticSampler sampler(40, 3, 1, {.seed = 2});
  const auto share = sampler.indices();
  sampler.record_batch(0, 4);
  sampler.record_batch(1, 4);
  EXPECT_EQ(sampler.num_processed(), 8u);
  EXPECT_EQ(sampler.batch(2, 4), std::vector<std::size_t>(share.begin() + 8, share.begin() + 12));
  Mask others(40, 0);
  others[share[0]] = 1;                            // already counted
  for (std::size_t i = 0; i < 40; ++i) {
    if (std::find(share.begin(), share.end(), i) == share.end() && i % 2 == 0) others[i] = 1;
  }
  const std::size_t added = static_cast<std::size_t>(std::count(others.begin(), others.end(), 1)) - 1;
  sampler.record_processed(others);
  EXPECT_EQ(sampler.num_processed(), 8u + added);
  EXPECT_EQ(sampler.indices(), share) << "the share stays until the next split";
  sampler.split(3, 1);
  EXPECT_EQ(sampler.num_remaining(), 40 - 8 - added);
  sampler.set_epoch(1);
  EXPECT_EQ(sampler.num_processed(), 0u);
  EXPECT_EQ(sampler.num_remaining(), 40u);
}

// Ranks train on their shares, commit (the union of their progress, as
// TorchState::save makes it), go on past the commit, and fail. In the next
// world, of another size, survivors restore the commit and split again, and
// new ranks take the commit as a sync gives it. Every index must be in a
// committed batch of the epoch; twice only as padding.
TEST(ElasticSamplerTest, EveryIndexOncePerEpochAcrossSizeChanges) {
  std::mt19937 random(7);
  auto pick = [&](int low, int high) { return std::uniform_int_distribution<int>(low, high)(random); };
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = static_cast<std::size_t>(pick(1, 120));
    const std::size_t batch_size = static_cast<std::size_t>(pick(1, 5));
    const ElasticSamplerOptions options{.shuffle = trial % 3 != 0, .seed = static_cast<std::uint64_t>(trial)};
    std::vector<ElasticSampler> world;
    for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
      SCOPED_TRACE("trial " + std::to_string(trial) + " epoch " + std::to_string(epoch));
      Mask committed(n, 0);
      std::vector<int> count(n, 0);
      std::size_t padding = 0;
      for (bool done = false; !done;) {
        const int size = pick(1, 6);
        if (world.size() > static_cast<std::size_t>(size)) world.erase(world.begin() + size, world.end());
        for (int r = 0; r < size; ++r) {
          if (static_cast<std::size_t>(r) < world.size()) {
            world[r].load(epoch, committed);  // restore
            world[r].split(size, r);          // reset
          } else {
            world.emplace_back(n, size, r, options);
            world.back().load(epoch, committed);  // sync
          }
        }
        for (const auto& sampler : world) {
          for (std::size_t index : sampler.indices()) ASSERT_FALSE(committed[index]) << "committed index " << index;
        }
        padding += world[0].num_samples() * static_cast<std::size_t>(size) - world[0].num_remaining();
        const std::size_t batches = world[0].num_batches(batch_size);
        // The last world trains to the end; the others fail somewhere.
        done = pick(0, 3) == 0;
        const std::size_t kept = done ? batches : static_cast<std::size_t>(pick(0, static_cast<int>(batches)));
        Mask merged(n, 0);
        for (auto& sampler : world) {
          ASSERT_EQ(sampler.num_batches(batch_size), batches) << "as many batches on every rank";
          for (std::size_t b = 0; b < kept; ++b) {
            for (std::size_t index : sampler.batch(b, batch_size)) ++count[index];
            sampler.record_batch(b, batch_size);
          }
          for (std::size_t i = 0; i < n; ++i) merged[i] |= sampler.processed()[i];
        }
        for (auto& sampler : world) sampler.record_processed(merged);
        committed = world[0].processed();
        // A batch past the commit, which the failure undoes.
        for (auto& sampler : world) sampler.record_batch(kept, batch_size);
      }
      std::size_t extra = 0;
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_GE(count[i], 1) << "index " << i << " never processed";
        extra += static_cast<std::size_t>(count[i] - 1);
      }
      EXPECT_LE(extra, padding) << "only padding repeats an index";
      for (auto& sampler : world) sampler.set_epoch(epoch + 1);
    }
  }
}

TEST(ElasticSamplerTest, BadArgumentsAreErrors) {
  EXPECT_THROW(ElasticSampler(10, 0, 0), InvalidArgumentError);
  EXPECT_THROW(ElasticSampler(10, 2, 2), InvalidArgumentError);
  EXPECT_THROW(ElasticSampler(10, 2, -1), InvalidArgumentError);
  ElasticSampler sampler(10, 2, 0);
  EXPECT_THROW(sampler.split(3, 3), InvalidArgumentError);
  EXPECT_THROW(sampler.num_batches(0), InvalidArgumentError);
  EXPECT_THROW(sampler.batch(0, 0), InvalidArgumentError);
  EXPECT_THROW(sampler.record_batch(0, 0), InvalidArgumentError);
  EXPECT_TRUE(sampler.batch(5, 1).empty()) << "past the share";
  EXPECT_THROW(sampler.record_indices({1, 10}), InvalidArgumentError);
  EXPECT_EQ(sampler.num_processed(), 0u) << "a bad index records nothing";
  EXPECT_THROW(sampler.record_processed(Mask(9, 1)), InvalidArgumentError);
  EXPECT_THROW(sampler.load(1, Mask(11, 0)), InvalidArgumentError);
  try {
    sampler.load(1, Mask(11, 0));
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("11 entries for a dataset of 10"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// TorchState across real processes.

struct ElasticNetImpl : ::torch::nn::Module {
  ElasticNetImpl()
      : fc(register_module("fc", ::torch::nn::Linear(3, 4))),
        norm(register_module("norm", ::torch::nn::BatchNorm1d(4))) {}
  at::Tensor forward(const at::Tensor& x) { return norm->forward(fc->forward(x)); }
  ::torch::nn::Linear fc;
  ::torch::nn::BatchNorm1d norm;  // buffers: running statistics, a batch count
};
TORCH_MODULE(ElasticNet);

enum class OptimizerKind { SGD, Adam };

void PrintTo(OptimizerKind kind, std::ostream* os) { *os << (kind == OptimizerKind::SGD ? "SGD" : "Adam"); }

std::shared_ptr<::torch::optim::Optimizer> make_optimizer(OptimizerKind kind, const ElasticNet& model) {
  if (kind == OptimizerKind::SGD) {
    return std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.1).momentum(0.9));
  }
  return std::make_shared<::torch::optim::Adam>(model->parameters(), ::torch::optim::AdamOptions(0.01).amsgrad(true));
}

// Steps on data drawn from `seed`: the same seed, the same steps.
void train(ElasticNet& model, ::torch::optim::Optimizer& optimizer, int steps, int seed) {
  for (int s = 0; s < steps; ++s) {
    at::manual_seed(seed * 1000 + s);
    at::Tensor x = at::randn({8, 3});
    at::Tensor y = at::randn({8, 4});
    optimizer.zero_grad();
    (model->forward(x) - y).pow(2).mean().backward();
    optimizer.step();
  }
}

std::vector<at::Tensor> module_tensors(const ElasticNet& model) {
  std::vector<at::Tensor> tensors = model->parameters();
  for (const auto& buffer : model->buffers()) tensors.push_back(buffer);
  return tensors;
}

// Every tensor of the optimizer's state, in parameter order, the step counts as
// tensors; an undefined tensor for a parameter without state.
std::vector<at::Tensor> optimizer_tensors(::torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> tensors;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      auto it = optimizer.state().find(c10::guts::to_string(param.unsafeGetTensorImpl()));
      if (it == optimizer.state().end()) {
        tensors.emplace_back();
      } else if (auto* adam = dynamic_cast<::torch::optim::AdamParamState*>(it->second.get())) {
        tensors.push_back(adam->exp_avg());
        tensors.push_back(adam->exp_avg_sq());
        tensors.push_back(adam->max_exp_avg_sq());
        tensors.push_back(at::scalar_tensor(adam->step(), at::kLong));
      } else if (auto* sgd = dynamic_cast<::torch::optim::SGDParamState*>(it->second.get())) {
        tensors.push_back(sgd->momentum_buffer());
      } else {
        ADD_FAILURE() << "unknown optimizer state";
      }
    }
  }
  return tensors;
}

std::vector<at::Tensor> copies(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> result;
  for (const auto& t : tensors) result.push_back(t.defined() ? t.detach().clone() : at::Tensor());
  return result;
}

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  at::Tensor x = a.detach().contiguous();
  at::Tensor y = b.detach().contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

void expect_bitwise(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected,
                    const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(actual[i], expected[i])) << what << " " << i;
  }
}

struct Snapshot {
  std::vector<at::Tensor> module, optimizer;
  double lr = 0;
  std::int64_t epoch = 0;
  double loss = 0;
  Mask processed;
};

Snapshot snapshot(const ElasticNet& model, ::torch::optim::Optimizer& optimizer, TorchState& state,
                  const ElasticSampler& sampler) {
  return {copies(module_tensors(model)), copies(optimizer_tensors(optimizer)),
          optimizer.param_groups()[0].options().get_lr(), state.int_value("epoch"), state.double_value("loss"),
          sampler.processed()};
}

void expect_state(const Snapshot& actual, const Snapshot& expected) {
  expect_bitwise(actual.module, expected.module, "module tensor");
  expect_bitwise(actual.optimizer, expected.optimizer, "optimizer tensor");
  EXPECT_EQ(actual.lr, expected.lr);
  EXPECT_EQ(actual.epoch, expected.epoch);
  EXPECT_EQ(std::memcmp(&actual.loss, &expected.loss, sizeof(double)), 0) << actual.loss << " vs " << expected.loss;
  EXPECT_EQ(actual.processed, expected.processed);
}

class TorchStateCommit : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(TorchStateCommit, RestoreGoesBackToTheCommitBitwise) {
  const OptimizerKind kind = GetParam();
  kolo::testing::run_ranks(1, [kind](int) {
    RankSession session;
    at::manual_seed(1);
    ElasticNet model;
    auto optimizer = make_optimizer(kind, model);
    TorchState state(model, optimizer);
    std::int64_t& epoch = state.add_int("epoch", 3);
    double& loss = state.add_double("loss", 0.25);
    auto sampler = std::make_shared<ElasticSampler>(20, ElasticSamplerOptions{.seed = 1});
    state.add_sampler(sampler);

    train(model, *optimizer, 3, 1);
    sampler->record_batch(0, 4);
    epoch = 4;
    loss = -0.1;  // not exact in binary: compared bitwise
    state.commit();
    const Snapshot committed = snapshot(model, *optimizer, state, *sampler);

    // Everything moves on past the commit...
    train(model, *optimizer, 3, 2);
    const auto trained_on = copies(module_tensors(model));
    sampler->record_batch(1, 4);
    epoch = 5;
    loss = 7.5;
    optimizer->param_groups()[0].options().set_lr(0.5);
    // ...and comes back.
    state.restore();
    expect_state(snapshot(model, *optimizer, state, *sampler), committed);
    EXPECT_EQ(&epoch, &state.int_value("epoch")) << "references stay valid";
    EXPECT_EQ(epoch, 4);

    // The optimizer's whole state came back: the same steps give the same model.
    train(model, *optimizer, 3, 2);
    expect_bitwise(module_tensors(model), trained_on, "replayed step");
  });
}

INSTANTIATE_TEST_SUITE_P(Optimizers, TorchStateCommit, ::testing::Values(OptimizerKind::SGD, OptimizerKind::Adam),
                         [](const auto& info) { return info.param == OptimizerKind::SGD ? "SGDMomentum" : "Adam"; });

TEST(TorchStateTest, RestoreBeforeAnyCommitGoesBackToTheStart) {
  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    at::manual_seed(2);
    ElasticNet model;
    auto optimizer = make_optimizer(OptimizerKind::Adam, model);
    const auto initial = copies(module_tensors(model));
    TorchState state(model, optimizer);
    state.add_int("batch", 9);
    train(model, *optimizer, 2, 3);
    state.int_value("batch") = 11;
    ASSERT_FALSE(optimizer->state().empty());
    state.restore();
    EXPECT_TRUE(optimizer->state().empty()) << "state made after the save is dropped";
    expect_bitwise(module_tensors(model), initial, "initial tensor");
    EXPECT_EQ(state.int_value("batch"), 9);
  });
}

// Each rank starts apart: its own model, optimizer state (or none), values and
// sampler progress. After sync, every rank holds rank 0's, and has saved it.
struct SyncCase {
  int size;
  int stateless_rank;  // its optimizer has never stepped
};

void PrintTo(const SyncCase& c, std::ostream* os) {
  *os << c.size << " ranks, rank " << c.stateless_rank << " without optimizer state";
}

class TorchStateSync : public ::testing::TestWithParam<SyncCase> {};

TEST_P(TorchStateSync, EveryRankTakesRankZerosState) {
  const SyncCase c = GetParam();
  kolo::testing::run_ranks(c.size, [c](int rank) {
    RankSession session;
    at::manual_seed(100 + rank);
    ElasticNet model;
    auto optimizer = make_optimizer(OptimizerKind::Adam, model);
    optimizer->param_groups()[0].options().set_lr(0.01 * (rank + 1));
    if (rank != c.stateless_rank) train(model, *optimizer, rank + 1, rank);
    TorchState state(model, optimizer);
    state.add_int("epoch", 10 * rank + 1);
    state.add_double("loss", 0.1 * rank - 1.0 / 3);
    auto sampler = std::make_shared<ElasticSampler>(30, ElasticSamplerOptions{.seed = 3});
    state.add_sampler(sampler);
    sampler->set_epoch(static_cast<std::uint64_t>(rank));
    sampler->record_indices({static_cast<std::size_t>(rank), 20});

    state.sync();

    expect_identical_on_all_ranks(at::cat({flat_parameters(*model), model->norm->running_mean.to(at::kDouble),
                                           model->norm->running_var.to(at::kDouble)}),
                                  "check.module");
    expect_identical_on_all_ranks(model->norm->num_batches_tracked, "check.batches");
    std::vector<at::Tensor> flat;
    for (const auto& t : optimizer_tensors(*optimizer)) {
      if (t.defined()) flat.push_back(t.to(at::kDouble).reshape({-1}));
    }
    const std::size_t entries = c.stateless_rank == 0 ? 0 : 4 * model->parameters().size();
    ASSERT_EQ(flat.size(), entries) << "rank 0's state entries, no more, no fewer";
    if (!flat.empty()) expect_identical_on_all_ranks(at::cat(flat), "check.optimizer");
    EXPECT_EQ(optimizer->param_groups()[0].options().get_lr(), 0.01);
    EXPECT_EQ(state.int_value("epoch"), 1);
    EXPECT_EQ(state.double_value("loss"), -1.0 / 3);
    EXPECT_EQ(sampler->epoch(), 0u);
    EXPECT_EQ(sampler->num_processed(), 2u);
    EXPECT_TRUE(sampler->processed()[0] && sampler->processed()[20]);
    EXPECT_EQ(sampler->num_replicas(), c.size);
    EXPECT_EQ(sampler->rank(), rank);

    // sync saved what it gave: a restore keeps it.
    const Snapshot synced = snapshot(model, *optimizer, state, *sampler);
    train(model, *optimizer, 1, 50 + rank);
    state.restore();
    expect_state(snapshot(model, *optimizer, state, *sampler), synced);

    // The same step everywhere keeps every rank equal.
    train(model, *optimizer, 2, 7);
    expect_identical_on_all_ranks(flat_parameters(*model), "check.trained");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, TorchStateSync, ::testing::Values(SyncCase{2, 1}, SyncCase{3, 2}, SyncCase{3, 0}),
                         [](const auto& info) {
                           return "N" + std::to_string(info.param.size) + "_stateless" +
                                  std::to_string(info.param.stateless_rank);
                         });

// What rank 0's timeline traced of a sync on every rank: the names of its operations.
std::string traced_sync(TorchState& state, const std::string& path) {
  kolo::start_timeline(path);
  state.sync();
  kolo::stop_timeline();
  kolo::barrier({.name = "check.traced"});  // rank 0 has closed the file
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Ranks that hold the same state (survivors that restored one commit) send
// none of it; a tensor that differs anywhere is sent, and only it.
TEST(TorchStateSync, SendsOnlyWhatDiffersFromRankZero) {
  const std::string path = ::testing::TempDir() + "kolo-elastic-sync-" + std::to_string(::getpid()) + ".json";
  kolo::testing::run_ranks(3, [&](int rank) {
    RankSession session;
    at::manual_seed(9);
    ElasticNet model;
    auto optimizer = make_optimizer(OptimizerKind::Adam, model);
    train(model, *optimizer, 2, 4);
    TorchState state(model, optimizer);
    state.add_int("epoch", 2);

    const std::string same = traced_sync(state, path);
    if (rank == 0) {
      EXPECT_NE(same.find("kolo.elastic.module_digests"), std::string::npos) << same;
      EXPECT_NE(same.find("kolo.elastic.optimizer_digest"), std::string::npos) << same;
      EXPECT_EQ(same.find("kolo.elastic.module."), std::string::npos) << "no tensor sent: " << same;
      EXPECT_FALSE(std::regex_search(same, std::regex("kolo\\.elastic\\.optimizer[^_]"))) << same;
    }

    // Rank 2's bias and rank 1's learning rate drift.
    if (rank == 2) model->fc->bias.detach().add_(1.0);
    if (rank == 1) optimizer->param_groups()[0].options().set_lr(0.5);
    const std::string apart = traced_sync(state, path);
    if (rank == 0) {
      EXPECT_NE(apart.find("kolo.elastic.module.fc.bias"), std::string::npos) << apart;
      EXPECT_EQ(apart.find("kolo.elastic.module.fc.weight"), std::string::npos) << apart;
      EXPECT_EQ(apart.find("kolo.elastic.module.buffer."), std::string::npos) << apart;
      EXPECT_TRUE(std::regex_search(apart, std::regex("kolo\\.elastic\\.optimizer[^_]"))) << apart;
    }
    expect_identical_on_all_ranks(flat_parameters(*model), "check.module");
    EXPECT_EQ(optimizer->param_groups()[0].options().get_lr(), 0.01);
  });
  std::remove(path.c_str());
}

TEST(TorchStateTest, CommitMergesEveryRanksSamplerProgress) {
  kolo::testing::run_ranks(3, [](int rank) {
    RankSession session;
    ElasticNet model;
    TorchState state(model, make_optimizer(OptimizerKind::SGD, model));
    auto first = std::make_shared<ElasticSampler>(31, ElasticSamplerOptions{.seed = 4});
    auto second = std::make_shared<ElasticSampler>(12, ElasticSamplerOptions{.shuffle = false});
    state.add_sampler(first);
    state.add_sampler(second);
    const auto share = first->indices();
    first->record_batch(0, 2);
    first->record_batch(1, 2);
    second->record_batch(rank, 1);
    state.commit();

    Mask expected(31, 0);
    for (int r = 0; r < 3; ++r) {
      ElasticSampler other(31, 3, r, {.seed = 4});
      for (std::size_t index : other.batch(0, 4)) expected[index] = 1;
    }
    EXPECT_EQ(first->processed(), expected);
    EXPECT_EQ(first->num_processed(), 12u);
    EXPECT_EQ(first->indices(), share) << "a commit does not split again";
    EXPECT_EQ(second->num_processed(), 3u);

    // Progress past the commit is undone by a restore.
    first->record_batch(2, 2);
    state.restore();
    EXPECT_EQ(first->processed(), expected);
  });
}

TEST(TorchStateTest, MisuseIsAClearError) {
  kolo::testing::run_ranks(1, [](int) {
    RankSession session;
    ElasticNet model;
    auto optimizer = make_optimizer(OptimizerKind::SGD, model);
    auto expect_error = [](const std::function<void()>& f, const std::string& says) {
      try {
        f();
        ADD_FAILURE() << "no error; expected one saying " << says;
      } catch (const InvalidArgumentError& e) {
        EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
      }
    };
    expect_error([&] { TorchState(std::shared_ptr<::torch::nn::Module>(), optimizer); }, "module is null");
    expect_error([&] { TorchState(ElasticNet(nullptr), optimizer); }, "module is null");
    expect_error([&] { TorchState(model, nullptr); }, "optimizer is null");

    TorchState state(model, optimizer);
    state.add_int("epoch");
    expect_error([&] { state.add_double("epoch"); }, "exists already");
    expect_error([&] { state.add_int(""); }, "needs a name");
    expect_error([&] { state.double_value("epoch"); }, "(it is an int)");
    expect_error([&] { state.int_value("batch"); }, "no int value named 'batch'");
    expect_error([&] { state.add_sampler(nullptr); }, "sampler is null");
    auto sampler = std::make_shared<ElasticSampler>(5);
    state.add_sampler(sampler);
    expect_error([&] { state.add_sampler(sampler); }, "in the state already");

    // A module that changed since the save cannot be restored into.
    model->register_parameter("extra", at::zeros({2}));
    expect_error([&] { state.restore(); }, "parameters and buffers");
  });
}

TEST(TorchStateTest, SyncOfStatesBuiltApartIsAMismatch) {
  kolo::testing::run_ranks(2, [](int rank) {
    RankSession session;
    ElasticNet model;
    TorchState values(model, make_optimizer(OptimizerKind::SGD, model));
    values.add_int("epoch");
    if (rank == 1) values.add_double("lr");
    if (rank == 0) {
      values.sync();
    } else {
      try {
        values.sync();
        ADD_FAILURE() << "no mismatch";
      } catch (const MismatchError& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0 keeps the values {epoch (int)}, this rank {epoch (int), lr "
                                             "(double)}"),
                  std::string::npos)
            << e.what();
      }
    }
    ElasticNet other;
    TorchState samplers(other, make_optimizer(OptimizerKind::SGD, other));
    samplers.add_sampler(std::make_shared<ElasticSampler>(rank == 0 ? 10 : 11));
    if (rank == 0) {
      samplers.sync();
    } else {
      EXPECT_THROW(samplers.sync(), MismatchError);
    }
  });
}

// ---------------------------------------------------------------------------
// An elastic job: this binary's TorchElasticWorker test under kolorun
// --min-np, one process per worker. Four workers train an ElasticSampler's
// epochs with a DistributedOptimizer under kolo::elastic::run, committing every
// batch, and print each committed batch. Two of them SIGKILL themselves in the
// first epoch, at different steps: it runs at 4, 3 and 2 workers.

bool in_elastic_worker() { return std::getenv("KOLO_TEST_TORCH_ELASTIC_WORKER") != nullptr; }

constexpr std::size_t kDatasetSize = 61;  // no size in 2..4 divides it: padding
constexpr std::size_t kBatchSize = 3;
constexpr std::int64_t kEpochs = 2;

// Where a worker kills itself, and so where the others fail: in the commit
// that follows the step, or inside the DistributedOptimizer's backward and step.
enum class KillPoint { AfterStep, BeforeBackward };

struct Kill {
  int worker;
  std::int64_t epoch;
  std::size_t processed;  // once the epoch has this many indices processed
  KillPoint where;
};
const std::vector<Kill> kKills = {{3, 0, 15, KillPoint::AfterStep}, {2, 0, 40, KillPoint::BeforeBackward}};

std::string joined(const std::vector<std::size_t>& indices) {
  std::string text;
  for (std::size_t i : indices) {
    if (!text.empty()) text += ',';
    text += std::to_string(i);
  }
  return text;
}

TEST(TorchElasticWorker, TrainsThroughLostWorkers) {
  if (!in_elastic_worker()) GTEST_SKIP() << "runs as a worker of TorchElasticJob";
  const int worker = std::atoi(std::getenv("KOLO_ELASTIC_WORKER"));
  RankSession session;
  at::manual_seed(worker);  // apart until the first sync
  auto model = std::make_shared<::torch::nn::LinearImpl>(3, 1);
  model->to(at::kDouble);
  auto sgd = std::make_shared<::torch::optim::SGD>(model->parameters(), ::torch::optim::SGDOptions(0.05).momentum(0.9));
  kolo::torch::DistributedOptimizer optimizer(sgd, model->named_parameters());
  TorchState state(model, sgd);
  std::int64_t& epoch = state.add_int("epoch");
  auto sampler = std::make_shared<ElasticSampler>(kDatasetSize, ElasticSamplerOptions{.seed = 11});
  state.add_sampler(sampler);
  auto kill_at = [&](KillPoint where) {
    for (const Kill& kill : kKills) {
      if (kill.worker == worker && kill.where == where && kill.epoch == epoch &&
          sampler->num_processed() >= kill.processed) {
        ::raise(SIGKILL);
      }
    }
  };

  kolo::elastic::run(state, [&] {
    while (epoch < kEpochs) {
      // A new split: the epoch's start, or a reset's.
      std::printf("split worker %d epoch %lld size %d remaining %zu share %zu\n", worker,
                  static_cast<long long>(epoch), kolo::size(), sampler->num_remaining(), sampler->num_samples());
      std::fflush(stdout);
      for (std::size_t b = 0; b < sampler->num_batches(kBatchSize); ++b) {
        const std::vector<std::size_t> batch = sampler->batch(b, kBatchSize);
        at::Tensor index = at::tensor(std::vector<double>(batch.begin(), batch.end()), at::kDouble).reshape({-1, 1});
        at::Tensor x = at::cat({at::sin(index), at::cos(index), index / 61.0}, 1);
        optimizer.zero_grad();
        at::Tensor loss = (model->forward(x).squeeze(1) - x.sum(1)).pow(2).mean();
        // Each kill follows a collective of the batch: when it returns here,
        // every rank has finished the last commit.
        kolo::torch::average_metric(loss.item<double>(), "loss");
        kill_at(KillPoint::BeforeBackward);
        loss.backward();
        optimizer.step();
        kill_at(KillPoint::AfterStep);
        sampler->record_batch(b, kBatchSize);
        state.commit();
        std::printf("commit worker %d epoch %lld indices %s\n", worker, static_cast<long long>(epoch),
                    joined(batch).c_str());
        std::fflush(stdout);
      }
      sampler->set_epoch(static_cast<std::uint64_t>(++epoch));
      state.commit();
    }
  });
  std::ostringstream weights;
  weights.precision(17);
  for (const auto& p : model->parameters()) {
    for (std::int64_t i = 0; i < p.numel(); ++i) weights << p.reshape({-1})[i].item<double>() << ";";
  }
  std::printf("done worker %d rank %d size %d epoch %lld weights %s\n", worker, kolo::rank(), kolo::size(),
              static_cast<long long>(epoch), weights.str().c_str());
  std::fflush(stdout);
}

std::string self_path() {
  char path[4096];
  const ssize_t length = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return length > 0 ? std::string(path, static_cast<std::size_t>(length)) : std::string();
}

std::vector<std::size_t> parse_indices(const std::string& text) {
  std::vector<std::size_t> indices;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) indices.push_back(std::stoul(item));
  return indices;
}

TEST(TorchElasticJob, EveryIndexOncePerEpochAsWorkersAreLost) {
  if (in_elastic_worker()) GTEST_SKIP() << "the job's driver";
  const auto r = kolo::testing::run_command(
      {KOLORUN_PATH, "-np", "4", "--min-np", "2", self_path(), "--gtest_filter=TorchElasticWorker.*"},
      kolo::testing::time_bound(std::chrono::seconds(120)), {{"KOLO_TEST_TORCH_ELASTIC_WORKER", "1"}});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;

  // Per epoch: how often each index was in a committed batch, and how much
  // padding the epoch's splits had.
  std::map<std::int64_t, std::vector<int>> counts;
  std::map<std::int64_t, std::set<std::pair<int, std::size_t>>> splits;  // (size, remaining)
  std::map<int, std::string> done;  // worker -> final line's tail
  const std::regex commit(R"(commit worker \d+ epoch (\d+) indices ([\d,]+))");
  const std::regex split(R"(split worker \d+ epoch (\d+) size (\d+) remaining (\d+) share (\d+))");
  const std::regex finished(R"(done worker (\d+) rank \d+ size (\d+) epoch (\d+) weights (\S+))");
  std::map<std::int64_t, std::size_t> padding;
  for (const std::string& line : kolo::testing::lines_of(r.out)) {
    std::smatch m;
    if (std::regex_search(line, m, commit)) {
      auto& count = counts[std::stoll(m[1])];
      count.resize(kDatasetSize);
      for (std::size_t index : parse_indices(m[2])) ++count.at(index);
    } else if (std::regex_search(line, m, split)) {
      const std::int64_t e = std::stoll(m[1]);
      const int size = std::stoi(m[2]);
      const std::size_t remaining = std::stoul(m[3]);
      if (splits[e].insert({size, remaining}).second) {
        padding[e] += std::stoul(m[4]) * static_cast<std::size_t>(size) - remaining;
      }
    } else if (std::regex_search(line, m, finished)) {
      EXPECT_EQ(std::stoi(m[2]), 2) << line;
      EXPECT_EQ(std::stoll(m[3]), kEpochs) << line;
      done[std::stoi(m[1])] = m[4];
    }
  }
  ASSERT_EQ(done.size(), 2u) << "workers 0 and 1 finish\n" << r.out << r.err;
  EXPECT_EQ(done[0], done[1]) << "with the same model";
  EXPECT_GE(splits[0].size(), 3u) << "epoch 0 ran at 4, 3 and 2 workers\n" << r.out;
  for (std::int64_t e = 0; e < kEpochs; ++e) {
    ASSERT_TRUE(counts.count(e)) << "no commit in epoch " << e << "\n" << r.out;
    std::size_t extra = 0;
    for (std::size_t i = 0; i < kDatasetSize; ++i) {
      EXPECT_GE(counts[e][i], 1) << "epoch " << e << " never committed index " << i << "\n" << r.out;
      if (counts[e][i] > 1) extra += static_cast<std::size_t>(counts[e][i] - 1);
    }
    EXPECT_LE(extra, padding[e]) << "epoch " << e << ": only padding repeats an index\n" << r.out;
  }
}

}  // namespace
}  // namespace kolo_torch_testing
