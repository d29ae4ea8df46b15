// The parsers of KOLO_* environment variables (also used for kolorun's flags):
// parse_int, parse_double, parse_bool, and get_seconds, get_int_in, get_timeout
// and get_choice through a real variable.
// Malformed text must be an InvalidArgumentError (any other exception is a
// crash). Property: what a parser accepts, it accepts again as printed back.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "common/env.h"
#include "fuzz_check.h"
#include "kolo/error.h"

namespace {

constexpr const char* kVariable = "KOLO_FUZZ_SECONDS";

void check_int(const std::string& text) {
  try {
    const std::int64_t value = kolo::env::parse_int(text, "int");
    FUZZ_CHECK(kolo::env::parse_int(std::to_string(value), "int") == value);
  } catch (const kolo::InvalidArgumentError&) {
  }
}

void check_double(const std::string& text) {
  try {
    const double value = kolo::env::parse_double(text, "double");
    char shortest[64];
    const auto [end, ec] = std::to_chars(shortest, shortest + sizeof shortest, value);
    FUZZ_CHECK(ec == std::errc());
    FUZZ_CHECK(kolo::env::parse_double(std::string(shortest, end), "double") == value);
  } catch (const kolo::InvalidArgumentError&) {
  }
}

void check_bool(const std::string& text) {
  try {
    const bool value = kolo::env::parse_bool(text, "bool");
    FUZZ_CHECK(kolo::env::parse_bool(value ? "1" : "0", "bool") == value);
  } catch (const kolo::InvalidArgumentError&) {
  }
}

void check_seconds(const std::string& text) {
  setenv(kVariable, text.c_str(), 1);
  try {
    FUZZ_CHECK(kolo::env::get_seconds(kVariable, std::chrono::milliseconds(-1)).count() >= 0 || text.empty());
  } catch (const kolo::InvalidArgumentError&) {
  }
}

// What get_int_in returns is in its range; get_timeout never returns 0 (a
// timeout that would fail at once); get_choice returns one of the choices.
void check_ranged(const std::string& text) {
  setenv(kVariable, text.c_str(), 1);
  try {
    const std::int64_t value = kolo::env::get_int_in(kVariable, 5, -3, 1 << 20);
    FUZZ_CHECK(value >= -3 && value <= (1 << 20));
  } catch (const kolo::InvalidArgumentError&) {
  }
  try {
    FUZZ_CHECK(kolo::env::get_timeout(kVariable, std::chrono::milliseconds(7)).count() > 0);
  } catch (const kolo::InvalidArgumentError&) {
  }
  try {
    const std::string choice = kolo::env::get_choice(kVariable, "auto", {"0", "1", "auto"});
    FUZZ_CHECK(choice == "0" || choice == "1" || choice == "auto");
  } catch (const kolo::InvalidArgumentError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Environment values and arguments end at the first NUL.
  std::string text(reinterpret_cast<const char*>(data), size);
  text.resize(text.find('\0') == std::string::npos ? text.size() : text.find('\0'));
  check_int(text);
  check_double(text);
  check_bool(text);
  check_seconds(text);
  check_ranged(text);
  return 0;
}
