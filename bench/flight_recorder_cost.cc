// What the flight recorder costs per collective: the engine records every
// operation three times (begin at acceptance, Executing, Done). Times that
// sequence in a loop on this thread, for names as long as ResNet-50's, and prints
// the cost per operation and per ResNet-50 step (161 gradients).
//
//   flight_recorder_cost [--ops N] [--capacity C]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/flight_recorder.h"

int main(int argc, char** argv) {
  long ops = 2000000;
  std::size_t capacity = 1024;  // KOLO_FLIGHT_RECORDER_SIZE's default
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--ops") ops = std::atol(argv[i + 1]);
    else if (flag == "--capacity") capacity = static_cast<std::size_t>(std::atol(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: flight_recorder_cost [--ops N] [--capacity C]\n");
      return 2;
    }
  }
  if (ops <= 0 || capacity == 0) {
    std::fprintf(stderr, "flight_recorder_cost: --ops and --capacity must be positive\n");
    return 2;
  }
  kolo::engine::FlightRecorder recorder(capacity, 0, 2, "/dev/null");
  // 161 distinct names like the torch integration's, used round robin.
  std::vector<kolo::engine::Request> requests(161);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].name = "kolo.grad.layer" + std::to_string(i / 8) + ".conv" + std::to_string(i % 8) + ".weight";
    requests[i].op = kolo::engine::OpType::Allreduce;
    requests[i].dtype = kolo::DataType::Float32;
    requests[i].shape = {256, 256, 3, 3};
  }
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < ops; ++i) {
    const auto& request = requests[static_cast<std::size_t>(i) % requests.size()];
    const auto seq = recorder.begin(request, std::chrono::steady_clock::now());
    recorder.update(seq, kolo::engine::OpPhase::Executing);
    recorder.update(seq, kolo::engine::OpPhase::Done);
  }
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / ops;
  std::printf("flight recorder, capacity %zu: %.1f ns per operation; %.1f us per ResNet-50 step (161 operations)\n",
              capacity, ns, ns * 161 / 1000);
  return 0;
}
