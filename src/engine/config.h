// The engine's tunables, read once from the environment at init.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "common/settings.h"

namespace kolo::engine {

struct EngineConfig {
  // KOLO_FUSION_THRESHOLD (bytes, K/M/G suffixes): allreduces are fused up to this size.
  std::size_t fusion_threshold = 64 << 20;
  // KOLO_CYCLE_TIME (milliseconds, fractional): how often an idle rank joins negotiation.
  std::chrono::microseconds cycle_time{1000};
  // The short scheduler slice of the engine's thread, and of a caller's while it
  // waits for an operation (common/wake_slice.h); 0: the kernel's own.
  std::chrono::microseconds wake_slice{100};
  // KOLO_CACHE_CAPACITY: responses kept for the steady-state fast path (0 disables it).
  std::size_t cache_capacity = 1024;
  // KOLO_EAGER_BYTES: a cached allreduce up to this size travels in the
  // negotiation step itself (engine/agreement.h); 0 disables. Unset: 64 bytes in
  // jobs of up to 16 ranks, else 0.
  std::optional<std::size_t> eager_bytes;
  // KOLO_STALL_CHECK_TIME (seconds, 0 disables): rank 0 warns about operations
  // some ranks have waited on this long while others never submitted them.
  std::chrono::milliseconds stall_check_time{60000};
  // KOLO_STALL_SHUTDOWN_TIME (seconds, 0 = never): past this, the job stops with
  // an error naming the rank that is behind.
  std::chrono::milliseconds stall_shutdown_time{0};
  // KOLO_TIMELINE: write a Chrome trace here (rank 0 only, unless
  // KOLO_TIMELINE_ALL_RANKS=1: then rank r writes <name>.rank<r>.json).
  std::string timeline_path;
  bool timeline_all_ranks = false;
  // KOLO_FLIGHT_RECORDER_SIZE: operations each rank remembers (0 disables);
  // KOLO_FLIGHT_RECORDER_DIR: where rank<r>.json goes on an error, a stall or SIGUSR1.
  std::size_t flight_recorder_size = 1024;
  std::string flight_recorder_dir;
  // Empty for the job; for a world of some of its ranks (init with a list of
  // ranks) the world's name: its records go to <flight_recorder_dir>/<world>/,
  // since its ranks are not the job's.
  std::string flight_recorder_world;

  static EngineConfig from_env();
};

// Compared across ranks when the engine starts (engine.cc).
extern const settings::Setting kFusionThreshold, kCacheCapacity, kEagerBytes;
// kolorun chooses it for the ranks unless the user did.
extern const settings::Setting kFlightRecorderDir;

}  // namespace kolo::engine
