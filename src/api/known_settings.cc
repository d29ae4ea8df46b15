#include "api/known_settings.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include "common/logging.h"
#include "common/settings.h"

namespace kolo::detail {
namespace {

constexpr std::string_view kPrefix = "KOLO_";
// Kept for kolo's own test harness (KOLO_TEST_TIME_SCALE), which runs ranks of
// kolo programs with them set: they are not settings of kolo.
constexpr std::string_view kTestPrefix = "KOLO_TEST_";

// Edit distance (insertions, deletions, substitutions), small strings only.
std::size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), 0);
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string warning_for(std::string_view name) {
  std::string message = std::string(name) + " is not a kolo setting and is ignored";
  std::string_view closest;
  std::size_t best = SIZE_MAX;
  for (auto known : known_settings()) {
    const auto d = distance(name, known);
    if (d < best) best = d, closest = known;
  }
  // A third of the name's letters wrong is no longer a misspelling of it.
  if (best <= std::max<std::size_t>(2, (name.size() - kPrefix.size()) / 3))
    message += " (did you mean " + std::string(closest) + "?)";
  return message;
}

}  // namespace

const std::vector<std::string_view>& known_settings() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> all;
    for (const settings::Setting* s : settings::declared()) all.push_back(s->name);
    return all;
  }();
  return names;
}

std::vector<std::string> unknown_setting_warnings(const char* const* environment) {
  std::vector<std::string> warnings;
  for (auto entry = environment; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    if (text.substr(0, kPrefix.size()) != kPrefix || text.substr(0, kTestPrefix.size()) == kTestPrefix) continue;
    const auto name = text.substr(0, text.find('='));
    const auto& known = known_settings();
    if (std::find(known.begin(), known.end(), name) == known.end()) warnings.push_back(warning_for(name));
  }
  return warnings;
}

void warn_about_unknown_settings() {
  for (const auto& warning : unknown_setting_warnings(environ)) KOLO_LOG(Warning, warning);
}

}  // namespace kolo::detail
