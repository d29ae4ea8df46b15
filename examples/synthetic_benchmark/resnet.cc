#include "resnet.h"

#include <stdexcept>

namespace synthetic {
namespace {

torch::nn::Conv2d conv(int in, int out, int kernel, int stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Projects the identity path when the block changes resolution or width.
torch::nn::Sequential make_downsample(int in_planes, int out_planes, int stride) {
  if (stride == 1 && in_planes == out_planes) return torch::nn::Sequential(nullptr);
  return torch::nn::Sequential(conv(in_planes, out_planes, 1, stride), torch::nn::BatchNorm2d(out_planes));
}

template <typename Block>
torch::nn::Sequential make_stage(int& in_planes, int planes, int blocks, int stride) {
  torch::nn::Sequential stage;
  for (int i = 0; i < blocks; ++i) {
    stage->push_back(Block(in_planes, planes, i == 0 ? stride : 1));
    in_planes = planes * Block::Impl::kExpansion;
  }
  return stage;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int in_planes, int planes, int stride)
    : conv1(register_module("conv1", conv(in_planes, planes, 3, stride))),
      conv2(register_module("conv2", conv(planes, planes, 3, 1))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
      bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))) {
  if (auto projection = make_downsample(in_planes, planes * kExpansion, stride)) {
    downsample = register_module("downsample", projection);
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1->forward(conv1->forward(x)));
  out = bn2->forward(conv2->forward(out));
  return torch::relu(out + (downsample ? downsample->forward(x) : x));
}

BottleneckImpl::BottleneckImpl(int in_planes, int planes, int stride)
    : conv1(register_module("conv1", conv(in_planes, planes, 1, 1))),
      conv2(register_module("conv2", conv(planes, planes, 3, stride))),
      conv3(register_module("conv3", conv(planes, planes * kExpansion, 1, 1))),
      bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
      bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))),
      bn3(register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion))) {
  if (auto projection = make_downsample(in_planes, planes * kExpansion, stride)) {
    downsample = register_module("downsample", projection);
  }
}

torch::Tensor BottleneckImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1->forward(conv1->forward(x)));
  out = torch::relu(bn2->forward(conv2->forward(out)));
  out = bn3->forward(conv3->forward(out));
  return torch::relu(out + (downsample ? downsample->forward(x) : x));
}

ResNetImpl::ResNetImpl(std::array<int, 4> blocks, bool bottleneck, int num_classes)
    : conv1(register_module("conv1", conv(3, 64, 7, 2))), bn1(register_module("bn1", torch::nn::BatchNorm2d(64))) {
  int in_planes = 64;
  auto stage = [&](int planes, int count, int stride) {
    return bottleneck ? make_stage<Bottleneck>(in_planes, planes, count, stride)
                      : make_stage<BasicBlock>(in_planes, planes, count, stride);
  };
  layer1 = register_module("layer1", stage(64, blocks[0], 1));
  layer2 = register_module("layer2", stage(128, blocks[1], 2));
  layer3 = register_module("layer3", stage(256, blocks[2], 2));
  layer4 = register_module("layer4", stage(512, blocks[3], 2));
  fc = register_module("fc", torch::nn::Linear(in_planes, num_classes));

  for (auto& module : modules(/*include_self=*/false)) {
    if (auto* c = module->as<torch::nn::Conv2d>()) {
      torch::nn::init::kaiming_normal_(c->weight, 0.0, torch::kFanOut, torch::kReLU);
    }
  }
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  x = torch::relu(bn1->forward(conv1->forward(x)));
  x = torch::max_pool2d(x, /*kernel_size=*/3, /*stride=*/2, /*padding=*/1);
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc->forward(x);
}

ResNet make_resnet(const std::string& name, int num_classes) {
  if (name == "resnet18") return ResNet(std::array<int, 4>{2, 2, 2, 2}, /*bottleneck=*/false, num_classes);
  if (name == "resnet50") return ResNet(std::array<int, 4>{3, 4, 6, 3}, /*bottleneck=*/true, num_classes);
  throw std::invalid_argument("unknown model '" + name + "': expected resnet18 or resnet50");
}

}  // namespace synthetic
