#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "kolo/error.h"

namespace kolo::env {
namespace {

constexpr double kMaxSeconds = 1e9;  // about 31 years, as kolorun's --timeout
constexpr double kMinTimeoutSeconds = 0.001;

// "1073741824 (1G)": a bound as written, and in the suffix form where it has one.
std::string bound_text(std::int64_t n) {
  std::string text = std::to_string(n);
  for (auto [suffix, unit] : {std::pair{"G", std::int64_t{1} << 30}, std::pair{"M", std::int64_t{1} << 20}}) {
    if (n >= unit && n % unit == 0) return text + " (" + std::to_string(n / unit) + suffix + ")";
  }
  return text;
}

// Seconds from `lowest` to 1e9 (past that the milliseconds would not fit an
// int64: the conversion is undefined); `allowed` says so in a message.
std::chrono::milliseconds seconds_in_range(const char* name, const std::string& value, double lowest,
                                           const std::string& allowed) {
  double seconds = 0;
  try {
    seconds = parse_double(value, name);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(std::string(e.what()) + ": " + allowed);
  }
  if (seconds < lowest || seconds > kMaxSeconds)
    throw InvalidArgumentError(std::string(name) + ": '" + value + "' is out of range: " + allowed);
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

}  // namespace

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string get_string(const char* name, const std::string& fallback) {
  return get(name).value_or(fallback);
}

std::int64_t parse_int(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str()) throw InvalidArgumentError(what + ": '" + text + "' is not an integer");
  if (errno == ERANGE) throw InvalidArgumentError(what + ": '" + text + "' is out of range");
  std::int64_t multiplier = 1;
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") multiplier = 1024;
  else if (suffix == "M" || suffix == "m") multiplier = 1024 * 1024;
  else if (suffix == "G" || suffix == "g") multiplier = 1024LL * 1024 * 1024;
  else if (!suffix.empty()) throw InvalidArgumentError(what + ": '" + text + "' is not an integer");
  std::int64_t result = 0;
  if (__builtin_mul_overflow(static_cast<std::int64_t>(value), multiplier, &result))
    throw InvalidArgumentError(what + ": '" + text + "' is out of range");
  return result;
}

double parse_double(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || std::isnan(value))
    throw InvalidArgumentError(what + ": '" + text + "' is not a number");
  if (errno == ERANGE || std::isinf(value)) throw InvalidArgumentError(what + ": '" + text + "' is out of range");
  return value;
}

bool parse_bool(const std::string& text, const std::string& what) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  throw InvalidArgumentError(what + ": '" + text +
                             "' is not a boolean: allowed are 1 and 0 (true, yes, on; false, no, off)");
}

std::int64_t get_int(const char* name, std::int64_t fallback) {
  auto value = get(name);
  return value ? parse_int(*value, name) : fallback;
}

bool get_bool(const char* name, bool fallback) {
  auto value = get(name);
  return value ? parse_bool(*value, name) : fallback;
}

std::int64_t get_int_in(const char* name, std::int64_t fallback, std::int64_t min, std::int64_t max) {
  auto value = get(name);
  if (!value) return fallback;
  const std::string allowed = "allowed are " + bound_text(min) + " to " + bound_text(max);
  std::int64_t n = 0;
  try {
    n = parse_int(*value, name);
  } catch (const InvalidArgumentError& e) {
    throw InvalidArgumentError(std::string(e.what()) + ": " + allowed);
  }
  if (n < min || n > max) throw InvalidArgumentError(std::string(name) + ": '" + *value + "' is out of range: " + allowed);
  return n;
}

std::chrono::milliseconds get_seconds(const char* name, std::chrono::milliseconds fallback) {
  auto value = get(name);
  return value ? seconds_in_range(name, *value, 0, "allowed are 0 (off) to 1e9 seconds") : fallback;
}

std::chrono::milliseconds get_timeout(const char* name, std::chrono::milliseconds fallback) {
  auto value = get(name);
  // 0 means off where a setting can be off; a timeout cannot (it would fail at
  // once), and under a millisecond it is 0.
  return value ? seconds_in_range(name, *value, kMinTimeoutSeconds,
                                  "allowed are 0.001 to 1e9 seconds (a timeout cannot be off)")
               : fallback;
}

std::string get_choice(const char* name, const std::string& fallback, std::initializer_list<const char*> allowed) {
  return get_choice(name, fallback, std::span<const char* const>(allowed.begin(), allowed.size()));
}

std::string get_choice(const char* name, const std::string& fallback, std::span<const char* const> allowed) {
  auto value = get(name);
  if (!value) return fallback;
  std::string listed;
  for (const char* a : allowed) {
    if (*value == a) return *value;
    listed += (listed.empty() ? "" : ", ") + std::string(a);
  }
  throw InvalidArgumentError(std::string(name) + ": '" + *value + "' is not allowed: use one of " + listed);
}

}  // namespace kolo::env
