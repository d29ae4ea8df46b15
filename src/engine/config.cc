#include "engine/config.h"

#include "common/env.h"
#include "kolo/error.h"

namespace kolo::engine {

EngineConfig EngineConfig::from_env() {
  EngineConfig c;
  auto threshold = env::get_int("KOLO_FUSION_THRESHOLD", static_cast<std::int64_t>(c.fusion_threshold));
  if (threshold < 0) throw InvalidArgumentError("KOLO_FUSION_THRESHOLD must not be negative");
  c.fusion_threshold = static_cast<std::size_t>(threshold);
  if (auto cycle = env::get("KOLO_CYCLE_TIME")) {
    double ms = env::parse_double(*cycle, "KOLO_CYCLE_TIME");
    if (ms <= 0 || ms > 10000) throw InvalidArgumentError("KOLO_CYCLE_TIME must be in (0, 10000] milliseconds");
    c.cycle_time = std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000.0));
  }
  auto capacity = env::get_int("KOLO_CACHE_CAPACITY", static_cast<std::int64_t>(c.cache_capacity));
  if (capacity < 0 || capacity > (1 << 20)) throw InvalidArgumentError("KOLO_CACHE_CAPACITY must be in [0, 1048576]");
  c.cache_capacity = static_cast<std::size_t>(capacity);
  if (env::get("KOLO_EAGER_BYTES")) {
    auto eager = env::get_int("KOLO_EAGER_BYTES", 0);
    if (eager < 0 || eager > (64 << 10)) throw InvalidArgumentError("KOLO_EAGER_BYTES must be in [0, 65536]");
    c.eager_bytes = static_cast<std::size_t>(eager);
  }
  c.stall_check_time = env::get_seconds("KOLO_STALL_CHECK_TIME", c.stall_check_time);
  c.stall_shutdown_time = env::get_seconds("KOLO_STALL_SHUTDOWN_TIME", c.stall_shutdown_time);
  c.timeline_path = env::get_string("KOLO_TIMELINE", "");
  c.timeline_all_ranks = env::get_bool("KOLO_TIMELINE_ALL_RANKS", false);
  auto recorder = env::get_int("KOLO_FLIGHT_RECORDER_SIZE", static_cast<std::int64_t>(c.flight_recorder_size));
  if (recorder < 0 || recorder > (1 << 24)) throw InvalidArgumentError("KOLO_FLIGHT_RECORDER_SIZE must be in [0, 16777216]");
  c.flight_recorder_size = static_cast<std::size_t>(recorder);
  c.flight_recorder_dir = env::get_string("KOLO_FLIGHT_RECORDER_DIR", "");
  return c;
}

}  // namespace kolo::engine
