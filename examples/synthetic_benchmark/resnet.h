// ResNet-18 and ResNet-50 (He et al., 2015) in the libtorch C++ frontend, laid out
// like torchvision's so that parameter counts and shapes match the Python models
// in bench/ddp_synthetic.py.
#pragma once

#include <torch/torch.h>

#include <string>

namespace synthetic {

// Two 3x3 convolutions (ResNet-18/34).
struct BasicBlockImpl : torch::nn::Module {
  static constexpr int kExpansion = 1;
  BasicBlockImpl(int in_planes, int planes, int stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

// 1x1 reduce, 3x3, 1x1 expand by 4 (ResNet-50/101/152).
struct BottleneckImpl : torch::nn::Module {
  static constexpr int kExpansion = 4;
  BottleneckImpl(int in_planes, int planes, int stride);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(Bottleneck);

struct ResNetImpl : torch::nn::Module {
  // `blocks`: how many blocks each of the four stages has; `bottleneck` picks the block type.
  ResNetImpl(std::array<int, 4> blocks, bool bottleneck, int num_classes);
  torch::Tensor forward(torch::Tensor x);

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// "resnet18" or "resnet50"; throws std::invalid_argument otherwise.
ResNet make_resnet(const std::string& name, int num_classes = 1000);

}  // namespace synthetic
