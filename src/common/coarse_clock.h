// A cheap reading of std::chrono::steady_clock, a few milliseconds coarse.
//
// steady_clock::now() costs about 30 ns under kvm-clock, and an engine that read
// it several times per operation would spend a tenth of a small allreduce's
// latency on it. Stall checks (every 100 ms or more), an operation's age
// in a stall report and the flight recorder's timestamps need milliseconds, not
// nanoseconds; they read CLOCK_MONOTONIC_COARSE, the same clock as steady_clock
// (so the two compare) as of the last timer tick, in a few nanoseconds.
#pragma once

#include <time.h>

#include <chrono>

namespace kolo {

inline std::chrono::steady_clock::time_point coarse_now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

}  // namespace kolo
