#include <kolo/kolo.h>

#include <cstdio>

int main() {
  kolo::init();
  float x = 21.0f;
  kolo::allreduce(kolo::make_tensor(&x, 1), {.op = kolo::ReduceOp::Sum});
  std::printf("consumer: rank %d of %d, sum %.1f\n", kolo::rank(), kolo::size(), x * 2 / kolo::size());
  kolo::shutdown();
  return 0;
}
