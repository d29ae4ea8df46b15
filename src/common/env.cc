#include "common/env.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "kolo/error.h"

namespace kolo::env {
namespace {

constexpr double kMaxSeconds = 1e9;  // about 31 years, as kolorun's --timeout

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
  if (end == text.c_str() || errno == ERANGE) throw InvalidArgumentError(what + ": '" + text + "' is not an integer");
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
  if (end == text.c_str() || *end != '\0' || errno == ERANGE || !std::isfinite(value))
    throw InvalidArgumentError(what + ": '" + text + "' is not a number");
  return value;
}

bool parse_bool(const std::string& text, const std::string& what) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  throw InvalidArgumentError(what + ": '" + text + "' is not a boolean (use 1 or 0)");
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
  const std::string allowed = max == INT64_MAX ? "allowed are integers from " + std::to_string(min) + " (K, M, G: powers of 1024)"
                                               : "allowed are " + std::to_string(min) + " to " + std::to_string(max);
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
  if (!value) return fallback;
  double seconds = parse_double(*value, name);
  if (seconds < 0)
    throw InvalidArgumentError(std::string(name) + ": '" + *value + "' is negative: allowed are 0 (off) to 1e9 seconds");
  // Past this the milliseconds would not fit an int64 (the conversion is undefined).
  if (seconds > kMaxSeconds)
    throw InvalidArgumentError(std::string(name) + ": '" + *value + "' is too large: allowed are 0 (off) to 1e9 seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

std::chrono::milliseconds get_timeout(const char* name, std::chrono::milliseconds fallback) {
  const auto timeout = get_seconds(name, fallback);
  // 0 means off where a setting can be off; a timeout cannot (it would fail at
  // once), and under a millisecond it is 0.
  if (timeout.count() <= 0)
    throw InvalidArgumentError(std::string(name) + ": '" + get(name).value_or("") +
                               "' is not allowed: a timeout must be at least 0.001 seconds (up to 1e9)");
  return timeout;
}

std::string get_choice(const char* name, const std::string& fallback, std::initializer_list<const char*> allowed) {
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
