// One-line diagnostics on stderr: "[kolo 3] warning: message". The level comes
// from KOLO_LOG_LEVEL (error, warning, info, debug; default warning).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>

namespace kolo::log {

enum class Level { Error = 0, Warning = 1, Info = 2, Debug = 3 };

bool enabled(Level level);
// The rank shown in the prefix; -1 (the default) shows none.
void set_rank(int rank);
void write(Level level, const std::string& message);

// Lets one message through per `interval`, for warnings that a flood (of bad
// connections, say) would repeat thousands of times; the next one let through is
// told how many were held back. Not thread-safe: one per thread that logs.
class Throttle {
 public:
  explicit Throttle(std::chrono::milliseconds interval) : interval_(interval) {}
  // Whether to write the message now; `held_back` gets how many were not written
  // since the last one that was.
  bool allow(std::uint64_t& held_back);
  // Writes `message` as a warning when allowed, with how many were held back.
  void warn(const std::string& message);

 private:
  std::chrono::milliseconds interval_;
  std::optional<std::chrono::steady_clock::time_point> last_;
  std::uint64_t held_back_ = 0;
};

}  // namespace kolo::log

#define KOLO_LOG(level, stream_expr)                                       \
  do {                                                                     \
    if (::kolo::log::enabled(::kolo::log::Level::level)) {                 \
      std::ostringstream kolo_log_stream_;                                 \
      kolo_log_stream_ << stream_expr;                                     \
      ::kolo::log::write(::kolo::log::Level::level, kolo_log_stream_.str()); \
    }                                                                      \
  } while (0)
