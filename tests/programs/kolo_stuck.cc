// A kolo job in trouble, for kolorun's tests:
//   kolo_stuck stuck  - rank 0 waits in allreduce 'x'; the others sit in "user
//                       code" (sleep) and never submit it.
//   kolo_stuck fail   - as stuck, but rank 1 exits with code 3 after half a second.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "kolo/kolo.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "stuck";
  kolo::init();
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
