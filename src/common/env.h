// Tunables read from KOLO_* environment variables. A malformed value is an error
// naming the variable, the value and what is allowed, never silently replaced by
// the default or clamped.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>

namespace kolo::env {

std::optional<std::string> get(const char* name);
std::string get_string(const char* name, const std::string& fallback);
// Integers accept an optional K/M/G suffix (powers of 1024) for byte sizes.
std::int64_t get_int(const char* name, std::int64_t fallback);
bool get_bool(const char* name, bool fallback);
// The most bytes a size setting may give: transfers, slots and thresholds past
// it gain nothing, and sizes near 2^63 overflow where they are multiplied.
inline constexpr std::int64_t kMaxSettingBytes = std::int64_t{1} << 30;
// An integer (with the suffixes above) in [min, max].
std::int64_t get_int_in(const char* name, std::int64_t fallback, std::int64_t min, std::int64_t max);
// Seconds as a decimal number ("0.5", "30"), 0 to 1e9; 0 means off for every
// setting that takes it.
std::chrono::milliseconds get_seconds(const char* name, std::chrono::milliseconds fallback);
// Seconds for a timeout, which cannot be off: 0.001 to 1e9.
std::chrono::milliseconds get_timeout(const char* name, std::chrono::milliseconds fallback);
// One of `allowed`, spelled exactly.
std::string get_choice(const char* name, const std::string& fallback, std::initializer_list<const char*> allowed);
std::string get_choice(const char* name, const std::string& fallback, std::span<const char* const> allowed);

// Parsers used by the getters, exposed for kolorun's flags and the tests; they
// throw kolo::InvalidArgumentError naming `what` on malformed input.
std::int64_t parse_int(const std::string& text, const std::string& what);
double parse_double(const std::string& text, const std::string& what);
bool parse_bool(const std::string& text, const std::string& what);

}  // namespace kolo::env
