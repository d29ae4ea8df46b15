#include "common/settings.h"

#include <algorithm>
#include <span>

#include "common/env.h"

namespace kolo::settings {
namespace {

// Filled while the library loads (each declaration's Registration), read after.
std::vector<const Setting*>& registry() {
  static std::vector<const Setting*> settings;
  return settings;
}

std::span<const char* const> listed(const Setting& s) {
  const auto end = std::find(s.choices.begin(), s.choices.end(), nullptr);
  return {s.choices.begin(), static_cast<std::size_t>(end - s.choices.begin())};
}

}  // namespace

Registration::Registration(const Setting& setting) { registry().push_back(&setting); }

std::optional<std::string> Setting::value() const { return env::get(name); }

std::int64_t Setting::integer() const { return integer(env::parse_int(fallback, name)); }

std::int64_t Setting::integer(std::int64_t fallback) const { return env::get_int_in(name, fallback, min, max); }

std::chrono::milliseconds Setting::seconds() const {
  return seconds(std::chrono::milliseconds(static_cast<std::int64_t>(env::parse_double(fallback, name) * 1000.0)));
}

std::chrono::milliseconds Setting::seconds(std::chrono::milliseconds fallback) const {
  return kind == Kind::Timeout ? env::get_timeout(name, fallback) : env::get_seconds(name, fallback);
}

std::string Setting::choice() const { return env::get_choice(name, fallback, listed(*this)); }

bool Setting::flag() const { return flag(env::parse_bool(fallback, name)); }

bool Setting::flag(bool fallback) const { return env::get_bool(name, fallback); }

std::string Setting::text(const std::string& fallback) const { return env::get_string(name, fallback); }

std::vector<const Setting*> declared() {
  auto all = registry();
  std::sort(all.begin(), all.end(), [](const Setting* a, const Setting* b) {
    return std::string_view(a->name) < std::string_view(b->name);
  });
  return all;
}

const Setting* find(std::string_view name) {
  for (const Setting* s : registry()) {
    if (s->name == name) return s;
  }
  return nullptr;
}

void check_declared() {
  for (const Setting* s : declared()) {
    if (s->tools_only) continue;
    if (s->value()) {
      switch (s->kind) {
        case Kind::Integer: s->integer(0); break;
        case Kind::Seconds:
        case Kind::Timeout: s->seconds(std::chrono::milliseconds(0)); break;
        case Kind::Choice: env::get_choice(s->name, "", listed(*s)); break;
        case Kind::Flag: s->flag(false); break;
        case Kind::Decimal:
        case Kind::Text: break;
      }
    }
    if (s->check) s->check();
  }
}

}  // namespace kolo::settings
