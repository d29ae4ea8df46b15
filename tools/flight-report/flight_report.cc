#include "flight_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace kolo::flight {
namespace {

struct Op {
  std::uint64_t seq = 0;
  std::string name, op, state;
  double age_s = 0;  // since submission, at the time of the dump
};

struct RankRecord {
  int rank = -1;
  std::string reason;
  std::vector<Op> ops;  // oldest first
};

std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

std::string seconds(double s) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << s << " s";
  return out.str();
}

bool pending(const Op& op) { return op.state == "negotiating" || op.state == "executing"; }

// Bounds for the integers of a record, so that no conversion overflows and no
// loop over ranks runs away: more ranks than any job has, timestamps (steady
// clock microseconds) small enough that their differences fit.
constexpr std::int64_t kMaxRank = 1 << 20;
constexpr std::int64_t kMaxMicroseconds = std::int64_t{1} << 62;

// nlohmann's get<int>() of 1e300 is undefined and of 2^40 wraps: check first.
std::int64_t integer_at(const nlohmann::json& j, const char* key, std::int64_t max) {
  const auto& v = j.at(key);
  const bool in_range = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(max)
                                               : v.is_number_integer() && v.get<std::int64_t>() >= 0 &&
                                                     v.get<std::int64_t>() <= max;
  if (!in_range) throw std::runtime_error(std::string("'") + key + "' is not an integer from 0 to " + std::to_string(max));
  return v.get<std::int64_t>();
}

RankRecord parse(const std::string& text) {
  auto j = nlohmann::json::parse(text);
  RankRecord r;
  r.rank = static_cast<int>(integer_at(j, "rank", kMaxRank));
  r.reason = j.value("reason", "");
  const auto now = integer_at(j, "now_us", kMaxMicroseconds);
  for (const auto& rec : j.at("records")) {
    Op op;
    op.seq = static_cast<std::uint64_t>(integer_at(rec, "seq", std::numeric_limits<std::int64_t>::max()));
    op.name = rec.at("name").get<std::string>();
    op.op = rec.at("op").get<std::string>();
    op.state = rec.at("state").get<std::string>();
    op.age_s = static_cast<double>(now - integer_at(rec, "submitted_us", kMaxMicroseconds)) / 1e6;
    r.ops.push_back(std::move(op));
  }
  return r;
}

}  // namespace

std::string report_for_records(const std::vector<std::string>& rank_json, int size) {
  std::ostringstream out;
  std::map<int, RankRecord> ranks;
  for (const auto& text : rank_json) {
    try {
      auto r = parse(text);
      ranks[r.rank] = std::move(r);
    } catch (const std::exception& e) {
      out << "  (a flight record could not be read: " << e.what() << ")\n";
    }
  }
  if (size <= 0) size = ranks.empty() ? 0 : ranks.rbegin()->first + 1;

  std::vector<int> silent;
  for (int r = 0; r < size; ++r) {
    auto it = ranks.find(r);
    if (it == ranks.end()) {
      silent.push_back(r);
      continue;
    }
    const RankRecord& rec = it->second;
    out << "  rank " << r << " (" << rec.reason << "): ";
    auto last_done = std::find_if(rec.ops.rbegin(), rec.ops.rend(), [](const Op& o) { return o.state == "done"; });
    if (last_done != rec.ops.rend()) out << "last completed #" << last_done->seq << " '" << last_done->name << "'";
    else out << "no completed operation on record";
    std::vector<const Op*> waiting;
    for (const auto& op : rec.ops) if (pending(op)) waiting.push_back(&op);
    if (waiting.empty()) out << ", nothing pending\n";
    else {
      out << ", pending:";
      for (const Op* op : waiting) out << " #" << op->seq << " " << op->op << " '" << op->name << "' (" << op->state << ", " << seconds(op->age_s) << ")";
      out << "\n";
    }
  }

  // Verdict: a name pending somewhere that another rank has not submitted at all
  // (neither pending nor on record) names that rank as behind.
  std::map<std::string, std::vector<int>> pending_on;
  std::map<std::string, double> oldest;
  for (const auto& [r, rec] : ranks) {
    for (const auto& op : rec.ops) {
      if (!pending(op)) continue;
      pending_on[op.name].push_back(r);
      oldest[op.name] = std::max(oldest[op.name], op.age_s);
    }
  }
  std::vector<std::pair<double, std::string>> verdicts;
  for (const auto& [name, waiting] : pending_on) {
    std::vector<int> behind;
    for (const auto& [r, rec] : ranks) {
      // An init-capture: clang before 16 cannot capture a structured binding.
      bool seen = std::any_of(rec.ops.begin(), rec.ops.end(), [&wanted = name](const Op& o) { return o.name == wanted; });
      if (!seen) behind.push_back(r);
    }
    if (behind.empty()) {
      if (static_cast<int>(waiting.size()) == size)
        verdicts.emplace_back(oldest[name], "'" + name + "' was submitted by every rank but has not completed (" +
                                                seconds(oldest[name]) + "): the transport is stuck or a peer failed");
      continue;
    }
    verdicts.emplace_back(oldest[name], "rank(s) " + ranks_text(behind) + " behind: '" + name + "' is pending on rank(s) " +
                                            ranks_text(waiting) + " for " + seconds(oldest[name]) +
                                            " and was never submitted by rank(s) " + ranks_text(behind));
  }
  std::sort(verdicts.begin(), verdicts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });

  std::ostringstream head;
  head << "flight recorder report for " << size << " rank(s):\n";
  if (!silent.empty()) head << "  no flight record from rank(s) " << ranks_text(silent) << " (did they die before writing one?)\n";
  for (const auto& [age, text] : verdicts) head << "  verdict: " << text << "\n";
  if (verdicts.empty() && silent.empty()) head << "  verdict: no rank is waiting on another\n";
  return head.str() + out.str();
}

namespace {

bool written_since(const std::filesystem::path& file, WrittenSince since) {
  std::error_code ec;
  const auto written = std::filesystem::last_write_time(file, ec);
  return !ec && written >= since;
}

// `rank`'s record in `dir`; null when there is none, it is older than `since`
// or it cannot be parsed.
nlohmann::json read_record(const std::string& dir, int rank, WrittenSince since) {
  const auto file = std::filesystem::path(dir) / ("rank" + std::to_string(rank) + ".json");
  if (!written_since(file, since)) return nullptr;
  std::ifstream in(file);
  if (!in) return nullptr;
  std::stringstream buf;
  buf << in.rdbuf();
  return nlohmann::json::parse(buf.str(), nullptr, /*allow_exceptions=*/false);
}

}  // namespace

int blamed_rank(const std::string& dir, int rank, WrittenSince since) {
  try {
    const auto j = read_record(dir, rank, since);
    if (!j.is_object() || !j.contains("blames")) return -1;
    return static_cast<int>(integer_at(j, "blames", kMaxRank));
  } catch (const std::exception&) {
    return -1;  // unreadable or malformed: no blame, the report says the rest
  }
}

std::string record_reason(const std::string& dir, int rank, WrittenSince since) {
  try {
    const auto j = read_record(dir, rank, since);
    if (!j.is_object() || !j.contains("reason") || !j["reason"].is_string()) return {};
    return j["reason"].get<std::string>();
  } catch (const std::exception&) {
    return {};
  }
}

std::vector<std::filesystem::path> record_files(const std::string& dir, std::error_code& error, WrittenSince since) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    auto name = entry.path().filename().string();
    if (name.rfind("rank", 0) == 0 && entry.path().extension() == ".json" && written_since(entry.path(), since))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string report_for_directory(const std::string& dir, int size, WrittenSince since) {
  std::vector<std::string> texts;
  std::error_code ec;
  const auto files = record_files(dir, ec, since);
  if (ec) return "flight recorder report: cannot read " + dir + ": " + ec.message() + "\n";
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream buf;
    buf << in.rdbuf();
    texts.push_back(buf.str());
  }
  return report_for_records(texts, size);
}

}  // namespace kolo::flight
