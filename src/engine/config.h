// The engine's tunables, read once from the environment at init.
#pragma once

#include <chrono>
#include <cstddef>

namespace kolo::engine {

struct EngineConfig {
  // KOLO_FUSION_THRESHOLD (bytes, K/M/G suffixes): allreduces are fused up to this size.
  std::size_t fusion_threshold = 64 << 20;
  // KOLO_CYCLE_TIME (milliseconds, fractional): how often an idle rank joins negotiation.
  std::chrono::microseconds cycle_time{1000};
  // KOLO_CACHE_CAPACITY: responses kept for the steady-state fast path (0 disables it).
  std::size_t cache_capacity = 1024;

  static EngineConfig from_env();
};

}  // namespace kolo::engine
