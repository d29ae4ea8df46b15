// The parameter tensors of ResNet-50 (torchvision's resnet50: 53 convolutions
// without bias, 53 batch norms with weight and bias, one fully connected layer
// with bias; 161 tensors, 25,557,032 parameters), in forward order.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace kolo::bench {

struct ParamTensor {
  std::string name;     // "layer2.0.conv2.weight"
  std::size_t numel = 0;
};

std::vector<ParamTensor> resnet50_parameters();

}  // namespace kolo::bench
