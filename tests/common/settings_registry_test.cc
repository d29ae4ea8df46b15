// Each KOLO_* setting is declared once, where it is read (common/settings.h).
// These hold everything else to the declarations: the sources read no KOLO_*
// name but through one, the README's tables list every declared setting with
// its default and whose value counts (and nothing else), and the defaults the
// code keeps in its option structs are the declared ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/direct/direct_collectives.h"
#include "comm/ps/ps_settings.h"
#include "common/env.h"
#include "common/settings.h"
#include "engine/config.h"
#include "engine/settings_agreement.h"
#include "kolo/error.h"

namespace kolo::settings {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const Setting& named(const std::string& name) {
  const Setting* s = find(name);
  if (s == nullptr) throw std::runtime_error(name + " is not declared");
  return *s;
}

std::int64_t declared_integer(const std::string& name) { return env::parse_int(named(name).fallback, name); }

std::chrono::milliseconds declared_seconds(const std::string& name) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(env::parse_double(named(name).fallback, name) * 1000));
}

// Whether `fallback` is a value of the setting's kind (else it is words:
// "set by kolorun", "by communicator").
bool is_value(const Setting& s) {
  try {
    switch (s.kind) {
      case Kind::Integer: env::parse_int(s.fallback, s.name); return true;
      case Kind::Decimal:
      case Kind::Seconds:
      case Kind::Timeout: env::parse_double(s.fallback, s.name); return true;
      case Kind::Flag: env::parse_bool(s.fallback, s.name); return true;
      case Kind::Choice: return true;
      case Kind::Text: return false;
    }
  } catch (const InvalidArgumentError&) {
  }
  return false;
}

TEST(SettingsRegistry, DeclarationsAreWellFormed) {
  const auto all = declared();
  ASSERT_GT(all.size(), 50u);
  std::set<std::string> names;
  for (const Setting* s : all) {
    const std::string name = s->name;
    EXPECT_TRUE(names.insert(name).second) << name << " is declared twice";
    EXPECT_EQ(name.rfind("KOLO_", 0), 0u) << name;
    EXPECT_NE(name.rfind("KOLO_TEST_", 0), 0u) << name << ": KOLO_TEST_ is the test harness's";
    EXPECT_TRUE(std::regex_match(name, std::regex("KOLO_[A-Z0-9_]+"))) << name;
    EXPECT_GT(std::string(s->fallback).size(), 0u) << name;
    EXPECT_GT(std::string(s->doc).size(), 10u) << name << " has no doc line";
    EXPECT_EQ(std::string(s->doc).find('\n'), std::string::npos) << name;
    if (s->kind == Kind::Integer) {
      EXPECT_LE(s->min, s->max) << name;
      if (is_value(*s)) {
        const auto d = env::parse_int(s->fallback, name);
        EXPECT_TRUE(d >= s->min && d <= s->max) << name << "'s default " << s->fallback << " is out of its range";
      }
    }
    if (s->kind == Kind::Choice) {
      const auto end = std::find(s->choices.begin(), s->choices.end(), nullptr);
      EXPECT_NE(end, s->choices.begin()) << name << " has no choices";
      EXPECT_TRUE(std::any_of(s->choices.begin(), end, [&](const char* c) { return std::string(c) == s->fallback; }))
          << name << "'s default " << s->fallback << " is not one of its choices";
    }
    if (s->kind == Kind::Seconds && is_value(*s)) EXPECT_GE(declared_seconds(name).count(), 0) << name;
    if (s->kind == Kind::Timeout) EXPECT_GT(declared_seconds(name).count(), 0) << name << ": a timeout cannot be off";
  }
}

// A name read with a literal (env::get_int_in("KOLO_X", ...), getenv("KOLO_X"),
// lookup(env, "KOLO_X")) would be a second declaration of its bounds or
// default; and a declaration outside libkolo would be unknown to the ranks.
TEST(SettingsRegistry, TheSourcesReadEveryNameThroughItsDeclaration) {
  const std::regex literal_read(R"((env::get\w*|getenv|lookup)\(\s*(env,\s*)?"KOLO_)");
  const std::regex declaration(R"(KOLO_SETTING\()");
  std::size_t files = 0, declaring = 0;
  for (const char* folder : {"src", "tools"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(KOLO_SOURCE_DIR) / folder)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      ++files;
      const std::string text = read_file(entry.path());
      std::smatch m;
      EXPECT_FALSE(std::regex_search(text, m, literal_read))
          << entry.path() << " reads " << m.str() << "...: read it through its declaration (common/settings.h)";
      if (std::regex_search(text, declaration) && entry.path().filename() != "settings.h") {
        ++declaring;
        EXPECT_EQ(std::string(folder), "src") << entry.path() << " declares a setting outside libkolo";
      }
    }
  }
  EXPECT_GT(files, 100u);
  EXPECT_GT(declaring, 15u);
}

struct Row {
  std::string defaults;  // backticks removed
  std::string meaning;
};

// The rows of the README's tables under "## Configuration", by variable.
std::map<std::string, Row> readme_rows() {
  const std::string readme = read_file(fs::path(KOLO_SOURCE_DIR) / "README.md");
  const auto begin = readme.find("\n## Configuration\n");
  EXPECT_NE(begin, std::string::npos);
  const auto end = readme.find("\n## ", begin + 1);
  std::istringstream section(readme.substr(begin, end - begin));
  std::map<std::string, Row> rows;
  const std::regex name("KOLO_[A-Z0-9_]+");
  for (std::string line; std::getline(section, line);) {
    if (line.rfind("| `KOLO_", 0) != 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '|') {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    EXPECT_EQ(cells.size(), 3u) << line;
    if (cells.size() != 3) continue;
    std::string defaults;
    for (char c : cells[1]) {
      if (c != '`') defaults += c;
    }
    defaults = defaults.substr(defaults.find_first_not_of(' '));
    for (std::sregex_iterator m(cells[0].begin(), cells[0].end(), name), stop; m != stop; ++m) {
      EXPECT_EQ(rows.count(m->str()), 0u) << m->str() << " has two rows";
      rows[m->str()] = {defaults, cells[2]};
    }
  }
  return rows;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

TEST(SettingsRegistry, TheReadmeTablesListEveryDeclaredSettingWithItsDefault) {
  const auto rows = readme_rows();
  for (const Setting* s : declared()) {
    const auto row = rows.find(s->name);
    if (row == rows.end()) {
      ADD_FAILURE() << s->name << " has no row in the README's settings tables";
      continue;
    }
    EXPECT_EQ(row->second.defaults.rfind(s->fallback, 0), 0u)
        << s->name << ": the README's default '" << row->second.defaults << "' does not begin with the declared '"
        << s->fallback << "'";
    const std::string meaning = lower(row->second.meaning);
    const bool says_all = meaning.find("must be the same on every rank") != std::string::npos;
    const bool says_zero = meaning.find("rank 0's value holds") != std::string::npos;
    EXPECT_EQ(says_all, s->scope == Scope::AllRanks) << s->name << ": the README and the declaration differ on "
                                                     << "whether every rank must have the same value";
    EXPECT_EQ(says_zero, s->scope == Scope::RankZero) << s->name << ": the README and the declaration differ on "
                                                      << "whether rank 0's value holds";
  }
  for (const auto& [name, row] : rows) EXPECT_NE(find(name), nullptr) << "the README lists " << name << ", undeclared";
}

// Option structs keep defaults of their own (tests build them directly): they
// must be the declared ones, which the README shows.
TEST(SettingsRegistry, TheOptionStructsDefaultsAreTheDeclaredOnes) {
  const engine::EngineConfig engine;
  EXPECT_EQ(static_cast<std::int64_t>(engine.fusion_threshold), declared_integer("KOLO_FUSION_THRESHOLD"));
  EXPECT_EQ(static_cast<std::int64_t>(engine.cache_capacity), declared_integer("KOLO_CACHE_CAPACITY"));
  EXPECT_EQ(static_cast<std::int64_t>(engine.flight_recorder_size), declared_integer("KOLO_FLIGHT_RECORDER_SIZE"));
  EXPECT_EQ(engine.wake_slice.count(), declared_integer("KOLO_WAKE_SLICE_US"));
  EXPECT_EQ(engine.stall_check_time, declared_seconds("KOLO_STALL_CHECK_TIME"));
  EXPECT_EQ(engine.stall_shutdown_time, declared_seconds("KOLO_STALL_SHUTDOWN_TIME"));
  EXPECT_EQ(engine.cycle_time, std::chrono::microseconds(
                                   static_cast<std::int64_t>(env::parse_double(named("KOLO_CYCLE_TIME").fallback, "") * 1000)));
  EXPECT_EQ(engine.timeline_all_ranks, env::parse_bool(named("KOLO_TIMELINE_ALL_RANKS").fallback, ""));

  const comm::CommunicatorOptions options;
  EXPECT_EQ(options.peer_timeout, declared_seconds("KOLO_PEER_TIMEOUT"));
  EXPECT_EQ(options.connect_timeout, declared_seconds("KOLO_START_TIMEOUT"));
  EXPECT_EQ(options.wake_slice.count(), declared_integer("KOLO_WAKE_SLICE_US"));

  EXPECT_EQ(static_cast<std::int64_t>(comm::ps::PsSettings{}.partition_bytes),
            declared_integer("KOLO_PS_PARTITION_BYTES"));

  const comm::direct::Tuning tuning;  // gloo's; tcp's round is automatic
  EXPECT_EQ(static_cast<std::int64_t>(tuning.small_bytes), declared_integer("KOLO_TCP_SMALL_BYTES"));
  EXPECT_EQ(static_cast<std::int64_t>(tuning.small_bytes), declared_integer("KOLO_GLOO_SMALL_BYTES"));
  EXPECT_EQ(static_cast<std::int64_t>(tuning.round_bytes), declared_integer("KOLO_GLOO_ROUND_BYTES"));
  const std::string tcp_round = named("KOLO_TCP_ROUND_BYTES").fallback;
  EXPECT_EQ(env::parse_int(tcp_round.substr(0, tcp_round.find(' ')), ""),
            static_cast<std::int64_t>(comm::direct::Tuning::kAutoRoundBytes));
}

// The names the engine compares come from declarations of the settings that
// must agree: any other is refused, so that the README's list stays whole.
TEST(SettingsRegistry, OnlySettingsDeclaredToAgreeAreCompared) {
  auto self = comm::make_self_communicator();
  const std::vector<comm::SharedSetting> agreeing = {{"KOLO_FUSION_THRESHOLD", 1}, {"KOLO_TCP_ROUND_BYTES", 2}};
  EXPECT_NO_THROW(engine::check_ranks_agree(*self, agreeing));
  for (const char* name : {"KOLO_CYCLE_TIME", "KOLO_SHM_SLOT_BYTES", "KOLO_NOT_DECLARED"}) {
    const std::vector<comm::SharedSetting> other = {{name, 1}};
    EXPECT_THROW(engine::check_ranks_agree(*self, other), InvalidArgumentError) << name;
  }
}

}  // namespace
}  // namespace kolo::settings
