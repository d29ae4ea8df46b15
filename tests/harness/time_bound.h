// Upper bounds on how long something may take, stretched where everything is slow.
//
// A bound like "a stopped peer is named within 6 s" is the product's promise plus
// room for the scheduler. Under the sanitizers (several times slower) on two busy
// cores that room runs out, and a correct build fails by a few seconds. So
// scripts/test-sanitizers.sh sets KOLO_TEST_TIME_SCALE, and every upper bound a
// test puts on elapsed time goes through time_bound(). Lower bounds ("waited at
// least the timeout") and the timeouts handed to the product are never scaled.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace kolo::testing {

inline double time_scale() {
  static const double scale = [] {
    const char* text = std::getenv("KOLO_TEST_TIME_SCALE");
    const double value = text ? std::strtod(text, nullptr) : 1.0;
    return value >= 1.0 ? value : 1.0;
  }();
  return scale;
}

template <class Rep, class Period>
std::chrono::milliseconds time_bound(std::chrono::duration<Rep, Period> bound) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(bound);
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms.count() * time_scale()));
}

// A hang guard handed to a program on its command line (kolorun --timeout,
// timeout(1)), in whole seconds, stretched like time_bound.
inline std::string seconds_bound(std::chrono::seconds bound) {
  return std::to_string(std::chrono::duration_cast<std::chrono::seconds>(time_bound(bound)).count());
}

}  // namespace kolo::testing
