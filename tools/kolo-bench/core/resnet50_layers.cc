#include "resnet50_layers.h"

namespace kolo::bench {
namespace {

class Builder {
 public:
  void conv(const std::string& name, std::size_t in, std::size_t out, std::size_t k) {
    params_.push_back({name + ".weight", out * in * k * k});
  }
  void bn(const std::string& name, std::size_t channels) {
    params_.push_back({name + ".weight", channels});
    params_.push_back({name + ".bias", channels});
  }
  void linear(const std::string& name, std::size_t in, std::size_t out) {
    params_.push_back({name + ".weight", out * in});
    params_.push_back({name + ".bias", out});
  }
  std::vector<ParamTensor> take() { return std::move(params_); }

 private:
  std::vector<ParamTensor> params_;
};

// A bottleneck block: 1x1 reduce, 3x3, 1x1 expand (x4), with a projection on the
// first block of each stage.
void bottleneck(Builder& b, const std::string& name, std::size_t in, std::size_t planes, bool downsample) {
  const std::size_t out = planes * 4;
  b.conv(name + ".conv1", in, planes, 1);
  b.bn(name + ".bn1", planes);
  b.conv(name + ".conv2", planes, planes, 3);
  b.bn(name + ".bn2", planes);
  b.conv(name + ".conv3", planes, out, 1);
  b.bn(name + ".bn3", out);
  if (downsample) {
    b.conv(name + ".downsample.0", in, out, 1);
    b.bn(name + ".downsample.1", out);
  }
}

}  // namespace

std::vector<ParamTensor> resnet50_parameters() {
  Builder b;
  b.conv("conv1", 3, 64, 7);
  b.bn("bn1", 64);
  const std::size_t blocks[4] = {3, 4, 6, 3};
  const std::size_t planes[4] = {64, 128, 256, 512};
  std::size_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    for (std::size_t i = 0; i < blocks[stage]; ++i) {
      bottleneck(b, "layer" + std::to_string(stage + 1) + "." + std::to_string(i), in, planes[stage], i == 0);
      in = planes[stage] * 4;
    }
  }
  b.linear("fc", 2048, 1000);
  return b.take();
}

}  // namespace kolo::bench
