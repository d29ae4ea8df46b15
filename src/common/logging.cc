#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/settings.h"
#include "kolo/error.h"

namespace kolo::log {
namespace {

std::atomic<int> g_rank{-1};

KOLO_SETTING(kLevel, {.name = "KOLO_LOG_LEVEL", .kind = settings::Kind::Choice, .fallback = "warning",
                      .choices = {"error", "warning", "info", "debug"}, .doc = "the least severe log lines written"});

Level level_from(const std::string& value) {
  if (value == "error") return Level::Error;
  if (value == "info") return Level::Info;
  if (value == "debug") return Level::Debug;
  return Level::Warning;
}

// The log must never throw: a bad value (which init() refuses) logs at warning.
Level level_from_env() {
  try {
    return level_from(kLevel.choice());
  } catch (const std::exception&) {
    return Level::Warning;
  }
}

const char* name(Level level) {
  switch (level) {
    case Level::Error: return "error";
    case Level::Warning: return "warning";
    case Level::Info: return "info";
    case Level::Debug: return "debug";
  }
  return "?";
}

}  // namespace

bool enabled(Level level) {
  static const Level threshold = level_from_env();
  return level <= threshold;
}

void set_rank(int rank) { g_rank.store(rank); }


bool Throttle::allow(std::uint64_t& held_back) {
  const auto now = std::chrono::steady_clock::now();
  if (last_ && now - *last_ < interval_) {
    ++held_back_;
    return false;
  }
  last_ = now;
  held_back = held_back_;
  held_back_ = 0;
  return true;
}

void Throttle::warn(const std::string& message) {
  std::uint64_t held_back = 0;
  if (!allow(held_back)) return;
  KOLO_LOG(Warning, message << (held_back ? " (and " + std::to_string(held_back) +
                                                 " more since the last such warning, not shown)"
                                          : std::string()));
}

void write(Level level, const std::string& message) {
  int rank = g_rank.load();
  const std::string shown = detail::with_nul_shown(message);
  // One fprintf call per line so that lines from threads do not interleave.
  if (rank >= 0) std::fprintf(stderr, "[kolo %d] %s: %s\n", rank, name(level), shown.c_str());
  else std::fprintf(stderr, "[kolo] %s: %s\n", name(level), shown.c_str());
}

}  // namespace kolo::log
