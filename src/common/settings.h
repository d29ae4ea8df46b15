// A KOLO_* setting is declared once, in the file that reads it (NCCL's
// NCCL_PARAM is the model):
//
//   KOLO_SETTING(kSpin, {.name = "KOLO_TCP_SPIN_US", .kind = Kind::Integer, .fallback = "50",
//                        .min = 0, .max = 1000000, .doc = "microseconds a wait polls before it sleeps"});
//   ... kSpin.integer()
//
// and read through its declaration, which gives the bounds and, where the
// default is one value, the default. Every declaration registers itself when the
// library loads, and the rest follows from the registry: the names init() knows
// (api/known_settings.h), init()'s check of every value (check_declared()), the
// names the engine may compare across ranks (engine/settings_agreement.h), and,
// through tests/common/settings_registry_test.cc, the README's settings tables.
// Declare in src/ (libkolo), also what only kolorun or kolo-server reads: the
// ranks must know every name kolorun passes them.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kolo::settings {

enum class Kind {
  Integer,  // in [min, max], with a K/M/G suffix (powers of 1024) for sizes
  Decimal,  // a decimal number; `check` says which
  Seconds,  // a decimal number of seconds, 0 (off) to 1e9
  Timeout,  // seconds that cannot be off: 0.001 to 1e9
  Choice,   // one of `choices`, spelled exactly
  Flag,     // 1 or 0 (true, yes, on; false, no, off)
  Text,     // taken as given; `check`, if any, says what is allowed
};

// Whose value counts in a job of several ranks.
enum class Scope {
  Rank,      // each rank's own
  AllRanks,  // every rank must have the same: the engine compares them at init()
  RankZero,  // rank 0's holds for the job
};

struct Setting {
  const char* name;
  Kind kind;
  // The default as the README gives it: a value of the kind ("64M", "auto")
  // where the default is one value, otherwise words ("set by kolorun").
  const char* fallback;
  std::int64_t min = 0, max = 0;          // Integer
  std::array<const char*, 6> choices{};  // Choice, in the order messages list them
  Scope scope = Scope::Rank;
  // Only kolorun or kolo-server reads it: known to init(), not checked by it.
  bool tools_only = false;
  // What init() checks beyond the kind and the bounds (the reader itself, say).
  void (*check)() = nullptr;
  const char* doc = "";  // one line

  // The variable's value; unset and empty are both nullopt.
  std::optional<std::string> value() const;
  // Read by the kind's rules, naming the variable, the value and what is
  // allowed in an InvalidArgumentError. Without an argument the default is
  // `fallback`, which must then be a value of the kind.
  std::int64_t integer() const;
  std::int64_t integer(std::int64_t fallback) const;
  std::chrono::milliseconds seconds() const;  // Seconds and Timeout
  std::chrono::milliseconds seconds(std::chrono::milliseconds fallback) const;
  std::string choice() const;
  bool flag() const;
  bool flag(bool fallback) const;
  std::string text(const std::string& fallback = "") const;
};

// Every declared setting, ordered by name.
std::vector<const Setting*> declared();
// The declared setting of that name, or null.
const Setting* find(std::string_view name);
// init()'s check of every declared setting's value (not tools_only ones), in
// name order: throws InvalidArgumentError for the first bad one.
void check_declared();

class Registration {
 public:
  explicit Registration(const Setting& setting);
};

}  // namespace kolo::settings

// Declares and registers `variable`, a constant Setting initialized by the
// rest; a header may declare it `extern const kolo::settings::Setting variable;`
// for other files.
#define KOLO_SETTING(variable, ...)                            \
  constexpr ::kolo::settings::Setting variable = __VA_ARGS__; \
  [[maybe_unused]] const ::kolo::settings::Registration variable##_registration(variable)
