#include "engine/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "common/wire.h"

namespace kolo::engine {
namespace {

constexpr std::uint8_t kReportTag = 0x53;
constexpr std::size_t kMaxName = 4096;
constexpr std::size_t kMaxPending = 1 << 20;

std::string join_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

std::vector<std::uint8_t> encode_report(const PendingReport& report) {
  wire::Writer w;
  w.put(kReportTag);
  w.put<std::uint8_t>(report.joined);
  w.put<std::uint32_t>(static_cast<std::uint32_t>(report.pending.size()));
  for (const auto& [name, age] : report.pending) {
    w.put_string(name);
    w.put(age);
  }
  return w.take();
}

PendingReport decode_report(std::span<const std::uint8_t> bytes) {
  wire::Reader in(bytes);
  if (in.get<std::uint8_t>() != kReportTag) throw wire::WireError("not a pending-operations report");
  PendingReport report;
  report.joined = in.get<std::uint8_t>() != 0;
  auto count = in.get_count(kMaxPending, 12);
  for (std::uint32_t i = 0; i < count; ++i) {
    auto name = in.get_string(kMaxName);
    report.pending.emplace_back(std::move(name), in.get<std::int64_t>());
  }
  in.expect_done();
  return report;
}

std::vector<Stall> find_stalls(const std::vector<PendingReport>& by_rank, std::chrono::milliseconds threshold) {
  std::map<std::string, Stall> by_name;
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    for (const auto& [name, age] : by_rank[r].pending) {
      Stall& s = by_name[name];
      s.name = name;
      s.waited_ms = std::max(s.waited_ms, age);
      s.submitted.push_back(r);
    }
  }
  std::vector<Stall> out;
  for (auto& [name, s] : by_name) {
    if (s.waited_ms < threshold.count()) continue;
    for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
      if (!by_rank[r].joined && std::find(s.submitted.begin(), s.submitted.end(), r) == s.submitted.end())
        s.missing.push_back(r);
    }
    if (!s.missing.empty()) out.push_back(std::move(s));
  }
  // The longest wait first: it is the likeliest cause of the others.
  std::stable_sort(out.begin(), out.end(), [](const Stall& a, const Stall& b) { return a.waited_ms > b.waited_ms; });
  return out;
}

std::string describe(const Stall& stall) {
  char waited[32];
  std::snprintf(waited, sizeof waited, "%.1f", static_cast<double>(stall.waited_ms) / 1000.0);
  return "'" + stall.name + "' has waited " + waited + " s for rank(s) " + join_ranks(stall.missing) +
         " (submitted by " + join_ranks(stall.submitted) + ")";
}

}  // namespace kolo::engine
