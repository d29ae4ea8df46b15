#include "engine/config.h"

#include <cstdint>

#include "common/env.h"
#include "common/wake_slice.h"
#include "kolo/error.h"

namespace kolo::engine {

EngineConfig EngineConfig::from_env() {
  EngineConfig c;
  c.fusion_threshold = static_cast<std::size_t>(env::get_int_in(
      "KOLO_FUSION_THRESHOLD", static_cast<std::int64_t>(c.fusion_threshold), 0, env::kMaxSettingBytes));
  if (auto cycle = env::get("KOLO_CYCLE_TIME")) {
    const std::string allowed = "allowed are more than 0 to 10000 milliseconds (an idle rank always cycles)";
    double ms = 0;
    try {
      ms = env::parse_double(*cycle, "KOLO_CYCLE_TIME");
    } catch (const InvalidArgumentError& e) {
      throw InvalidArgumentError(std::string(e.what()) + ": " + allowed);
    }
    if (ms <= 0 || ms > 10000) throw InvalidArgumentError("KOLO_CYCLE_TIME: '" + *cycle + "' is out of range: " + allowed);
    c.cycle_time = std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000.0));
  }
  c.wake_slice = wake_slice_from_env();
  c.cache_capacity = static_cast<std::size_t>(
      env::get_int_in("KOLO_CACHE_CAPACITY", static_cast<std::int64_t>(c.cache_capacity), 0, 1 << 20));
  if (env::get("KOLO_EAGER_BYTES")) c.eager_bytes = static_cast<std::size_t>(env::get_int_in("KOLO_EAGER_BYTES", 0, 0, 64 << 10));
  c.stall_check_time = env::get_seconds("KOLO_STALL_CHECK_TIME", c.stall_check_time);
  c.stall_shutdown_time = env::get_seconds("KOLO_STALL_SHUTDOWN_TIME", c.stall_shutdown_time);
  c.timeline_path = env::get_string("KOLO_TIMELINE", "");
  c.timeline_all_ranks = env::get_bool("KOLO_TIMELINE_ALL_RANKS", false);
  c.flight_recorder_size = static_cast<std::size_t>(env::get_int_in(
      "KOLO_FLIGHT_RECORDER_SIZE", static_cast<std::int64_t>(c.flight_recorder_size), 0, 1 << 20));
  c.flight_recorder_dir = env::get_string("KOLO_FLIGHT_RECORDER_DIR", "");
  return c;
}

}  // namespace kolo::engine
