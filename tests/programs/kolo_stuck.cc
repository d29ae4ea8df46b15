// A kolo job in trouble, for kolorun's tests:
//   kolo_stuck stuck  - rank 0 waits in allreduce 'x'; the others sit in "user
//                       code" (sleep) and never submit it.
//   kolo_stuck fail   - as stuck, but rank 1 exits with code 3 after half a second.
//   kolo_stuck worlds-stuck - as stuck, in two worlds (init with a list of ranks):
//                       the job's even ranks and its odd ranks.
//   kolo_stuck steady FILE - every rank allreduces for up to 60 s, after the first
//                       one writing its pid to FILE.<rank>; an error is printed as
//                       "rank R: <error>" and ends the rank with code 4.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "kolo/kolo.h"

int steady(const std::string& file) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  try {
    for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
      float x = 1.0f;
      kolo::allreduce(kolo::make_tensor(&x, 1), {.name = "steady"});
      if (i == 0) std::ofstream(file + "." + std::to_string(kolo::rank())) << ::getpid() << "\n";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", kolo::rank(), e.what());
    std::fflush(stderr);
    std::_Exit(4);
  }
  kolo::shutdown();
  return 0;
}

// The job's ranks of this rank's parity (kolorun's KOLO_RANK and KOLO_SIZE).
std::vector<int> same_parity() {
  const int rank = std::atoi(std::getenv("KOLO_RANK"));
  const int size = std::atoi(std::getenv("KOLO_SIZE"));
  std::vector<int> ranks;
  for (int r = rank % 2; r < size; r += 2) ranks.push_back(r);
  return ranks;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "stuck";
  if (mode == "worlds-stuck")
    kolo::init(same_parity());
  else
    kolo::init();
  if (mode == "steady") return steady(argc > 2 ? argv[2] : "steady");
  float x = 1.0f;
  kolo::allreduce(kolo::make_tensor(&x, 1), {.name = "warmup"});
  if (kolo::rank() == 0) {
    kolo::allreduce(kolo::make_tensor(&x, 1), {.name = "x"});
  } else if (mode == "fail" && kolo::rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::_Exit(3);
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(60));
  }
  kolo::shutdown();
  return 0;
}
