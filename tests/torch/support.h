// Helpers shared by the kolo::torch suites. Torch work happens only inside the
// forked ranks: the parent test process must not start libtorch's thread pools
// before fork().
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace torch::nn {
class Module;
}

namespace kolo_torch_testing {

// One rank's kolo session: a single intra-op thread (ranks share the cores), then
// kolo::init(); kolo::shutdown() when it ends.
class RankSession {
 public:
  RankSession();
  ~RankSession();
  RankSession(const RankSession&) = delete;
  RankSession& operator=(const RankSession&) = delete;
};

// All parameters of a module, flattened and concatenated in float64.
at::Tensor flat_parameters(const ::torch::nn::Module& module);

// max |actual - expected| / max |expected|.
double relative_error(const at::Tensor& actual, const at::Tensor& expected);

// Adds a GoogleTest failure unless every rank holds bitwise the same `tensor`.
// Collective: every rank must call it with the same `name`.
void expect_identical_on_all_ranks(const at::Tensor& tensor, const std::string& name);

}  // namespace kolo_torch_testing
