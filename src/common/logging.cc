#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kolo::log {
namespace {

std::atomic<int> g_rank{-1};

Level level_from_env() {
  const char* value = std::getenv("KOLO_LOG_LEVEL");
  if (value == nullptr) return Level::Warning;
  if (std::strcmp(value, "error") == 0) return Level::Error;
  if (std::strcmp(value, "info") == 0) return Level::Info;
  if (std::strcmp(value, "debug") == 0) return Level::Debug;
  return Level::Warning;
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

void write(Level level, const std::string& message) {
  int rank = g_rank.load();
  // One fprintf call per line so that lines from threads do not interleave.
  if (rank >= 0) std::fprintf(stderr, "[kolo %d] %s: %s\n", rank, name(level), message.c_str());
  else std::fprintf(stderr, "[kolo] %s: %s\n", name(level), message.c_str());
}

}  // namespace kolo::log
