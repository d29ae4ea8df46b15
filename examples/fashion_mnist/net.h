// The classic small convnet for 28x28 grey images: two 5x5 convolutions with max
// pooling, then two fully connected layers with dropout between them.
#pragma once

#include <torch/torch.h>

namespace fashion_mnist {

struct NetImpl : torch::nn::Module {
  NetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 5)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 5)))),
        fc1(register_module("fc1", torch::nn::Linear(64 * 4 * 4, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, 10))) {}

  // x: [N, 1, 28, 28], normalized. Returns logits [N, 10].
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));  // [N, 32, 12, 12]
    x = torch::relu(torch::max_pool2d(conv2->forward(x), 2));  // [N, 64, 4, 4]
    x = torch::relu(fc1->forward(x.flatten(1)));
    x = torch::dropout(x, /*p=*/0.5, is_training());
    return fc2->forward(x);
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Net);

}  // namespace fashion_mnist
