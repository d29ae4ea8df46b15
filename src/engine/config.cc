#include "engine/config.h"

#include <cstdint>
#include <optional>

#include "common/env.h"
#include "common/settings.h"
#include "common/wake_slice.h"
#include "kolo/error.h"

namespace kolo::engine {
namespace {

using settings::Kind;
using settings::Scope;

// Milliseconds, fractional: an idle rank must cycle, so 0 is not off.
std::optional<std::chrono::microseconds> cycle_time_from_env();

}  // namespace

KOLO_SETTING(kFusionThreshold, {.name = "KOLO_FUSION_THRESHOLD", .kind = Kind::Integer, .fallback = "64M",
                                .min = 0, .max = env::kMaxSettingBytes, .scope = Scope::AllRanks,
                                .doc = "allreduces are fused into one transfer up to this many bytes"});
KOLO_SETTING(kCacheCapacity, {.name = "KOLO_CACHE_CAPACITY", .kind = Kind::Integer, .fallback = "1024", .min = 0,
                              .max = 1 << 20, .scope = Scope::AllRanks,
                              .doc = "negotiated responses kept for the steady-state fast path"});
KOLO_SETTING(kEagerBytes, {.name = "KOLO_EAGER_BYTES", .kind = Kind::Integer, .fallback = "by communicator",
                           .min = 0, .max = 64 << 10, .scope = Scope::AllRanks,
                           .doc = "a cached operation up to this size travels inside the negotiation step"});

namespace {

KOLO_SETTING(kCycleTime, {.name = "KOLO_CYCLE_TIME", .kind = Kind::Decimal, .fallback = "1",
                          .check = [] { cycle_time_from_env(); },
                          .doc = "milliseconds between negotiation cycles of an idle rank"});
KOLO_SETTING(kStallCheckTime, {.name = "KOLO_STALL_CHECK_TIME", .kind = Kind::Seconds, .fallback = "60",
                               .doc = "seconds after which rank 0 warns about a stalled operation"});
KOLO_SETTING(kStallShutdownTime, {.name = "KOLO_STALL_SHUTDOWN_TIME", .kind = Kind::Seconds, .fallback = "0",
                                  .doc = "seconds of a stall after which every rank stops"});
KOLO_SETTING(kTimeline, {.name = "KOLO_TIMELINE", .kind = Kind::Text, .fallback = "unset",
                         .doc = "the file rank 0 writes a Chrome trace of every tensor's phases to"});
KOLO_SETTING(kTimelineAllRanks, {.name = "KOLO_TIMELINE_ALL_RANKS", .kind = Kind::Flag, .fallback = "0",
                                 .doc = "every rank writes a trace of its own"});
KOLO_SETTING(kFlightRecorderSize, {.name = "KOLO_FLIGHT_RECORDER_SIZE", .kind = Kind::Integer, .fallback = "1024",
                                   .min = 0, .max = 1 << 20, .doc = "recent operations each rank remembers"});

std::optional<std::chrono::microseconds> cycle_time_from_env() {
  const auto cycle = kCycleTime.value();
  if (!cycle) return std::nullopt;
  const std::string allowed = "allowed are more than 0 to 10000 milliseconds (an idle rank always cycles)";
  double ms = 0;
  try {
    ms = env::parse_double(*cycle, kCycleTime.name);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(std::string(e.what()) + ": " + allowed);
  }
  if (ms <= 0 || ms > 10000) throw InvalidArgumentError(std::string(kCycleTime.name) + ": '" + *cycle + "' is out of range: " + allowed);
  return std::chrono::microseconds(static_cast<std::int64_t>(ms * 1000.0));
}

}  // namespace

KOLO_SETTING(kFlightRecorderDir, {.name = "KOLO_FLIGHT_RECORDER_DIR", .kind = Kind::Text,
                                  .fallback = "/tmp/kolo-flight-<job tag>",
                                  .doc = "where each rank writes its flight record"});

EngineConfig EngineConfig::from_env() {
  EngineConfig c;
  c.fusion_threshold = static_cast<std::size_t>(kFusionThreshold.integer(static_cast<std::int64_t>(c.fusion_threshold)));
  if (auto cycle = cycle_time_from_env()) c.cycle_time = *cycle;
  c.wake_slice = wake_slice_from_env();
  c.cache_capacity = static_cast<std::size_t>(kCacheCapacity.integer(static_cast<std::int64_t>(c.cache_capacity)));
  if (kEagerBytes.value()) c.eager_bytes = static_cast<std::size_t>(kEagerBytes.integer(0));
  c.stall_check_time = kStallCheckTime.seconds(c.stall_check_time);
  c.stall_shutdown_time = kStallShutdownTime.seconds(c.stall_shutdown_time);
  c.timeline_path = kTimeline.text();
  c.timeline_all_ranks = kTimelineAllRanks.flag(c.timeline_all_ranks);
  c.flight_recorder_size =
      static_cast<std::size_t>(kFlightRecorderSize.integer(static_cast<std::int64_t>(c.flight_recorder_size)));
  c.flight_recorder_dir = kFlightRecorderDir.text();
  return c;
}

}  // namespace kolo::engine
