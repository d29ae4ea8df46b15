#include "common/env.h"

#include <cerrno>
#include <cmath>
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

std::chrono::milliseconds get_seconds(const char* name, std::chrono::milliseconds fallback) {
  auto value = get(name);
  if (!value) return fallback;
  double seconds = parse_double(*value, name);
  if (seconds < 0) throw InvalidArgumentError(std::string(name) + ": must not be negative");
  // Past this the milliseconds would not fit an int64 (the conversion is undefined).
  if (seconds > kMaxSeconds) throw InvalidArgumentError(std::string(name) + ": must be at most 1e9 seconds");
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

}  // namespace kolo::env
