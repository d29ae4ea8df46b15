#include "support.h"

#include <ATen/Parallel.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <vector>

#include "kolo/kolo.h"
#include "kolo/torch/collectives.h"

namespace kolo_torch_testing {

RankSession::RankSession() {
  at::set_num_threads(1);
  kolo::init();
}

RankSession::~RankSession() { kolo::shutdown(); }

at::Tensor flat_parameters(const ::torch::nn::Module& module) {
  std::vector<at::Tensor> parts;
  for (const auto& parameter : module.parameters()) parts.push_back(parameter.detach().to(at::kDouble).reshape({-1}));
  return at::cat(parts);
}

double relative_error(const at::Tensor& actual, const at::Tensor& expected) {
  const double scale = expected.abs().max().item<double>();
  const double diff = (actual.to(at::kDouble) - expected.to(at::kDouble)).abs().max().item<double>();
  return scale > 0 ? diff / scale : diff;
}

void expect_identical_on_all_ranks(const at::Tensor& tensor, const std::string& name) {
  kolo::CollectiveOptions options;
  options.name = name;
  at::Tensor mine = tensor.detach().reshape({1, -1});
  at::Tensor all = kolo::torch::allgather(mine, options);
  ASSERT_EQ(all.size(0), kolo::size());
  for (int r = 0; r < kolo::size(); ++r) {
    EXPECT_TRUE(at::equal(all[r], mine[0])) << name << ": rank " << r << " differs from rank " << kolo::rank();
  }
}

}  // namespace kolo_torch_testing
