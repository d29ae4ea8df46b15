// Pinning for the benchmark programs that run one process per CPU.
#pragma once

#include <sched.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kolo::bench {

inline void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) throw std::runtime_error("cannot pin to CPU " + std::to_string(cpu));
}

// The CPUs of this process's affinity mask, in order.
inline std::vector<int> usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) throw std::runtime_error("sched_getaffinity failed");
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace kolo::bench
