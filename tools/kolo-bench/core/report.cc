#include "report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include <nlohmann/json.hpp>

namespace kolo::bench {
namespace {

std::string format(const char* fmt, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

nlohmann::json to_json(const ResultRow& r, ElemType type) {
  nlohmann::json j = {
      {"bytes", r.point.bytes},        {"count", r.point.bytes / elem_size(type)},   {"iters", r.point.iters},
      {"time_us", r.stats.mean_us},    {"median_us", r.stats.median_us}, {"min_us", r.stats.min_us},
      {"max_us", r.stats.max_us},      {"algbw_gbps", r.algbw_gbps},    {"busbw_gbps", r.busbw_gbps},
  };
  j["wrong"] = r.wrong < 0 ? nlohmann::json() : nlohmann::json(r.wrong);
  return j;
}

}  // namespace

Stats summarize(std::vector<double> t) {
  Stats s;
  if (t.empty()) return s;
  std::sort(t.begin(), t.end());
  s.mean_us = std::accumulate(t.begin(), t.end(), 0.0) / static_cast<double>(t.size());
  s.min_us = t.front();
  s.max_us = t.back();
  const std::size_t mid = t.size() / 2;
  s.median_us = t.size() % 2 ? t[mid] : (t[mid - 1] + t[mid]) / 2;
  return s;
}

ResultRow make_row(const SizePoint& point, const Stats& stats, Collective c, int nranks, std::int64_t wrong) {
  ResultRow row{point, stats, 0, 0, wrong};
  if (stats.mean_us > 0) row.algbw_gbps = static_cast<double>(point.bytes) / (stats.mean_us * 1e3);
  row.busbw_gbps = row.algbw_gbps * bus_factor(c, nranks);
  return row;
}

Reporter::Reporter(std::ostream& out, RunInfo info) : out_(out), info_(std::move(info)) {}

void Reporter::begin() {
  if (info_.options.json) return;
  const auto& o = info_.options;
  out_ << "# " << info_.program << "  backend=" << info_.backend << "  op=" << to_string(o.collective)
       << "  ranks=" << info_.nranks << "  dtype=" << to_string(o.type);
  if (is_reduction(o.collective)) out_ << "  reduce=" << to_string(o.reduce);
  if (o.collective == Collective::Broadcast) out_ << "  root=" << o.root;
  out_ << "  " << (o.in_place || o.collective == Collective::Broadcast ? "in-place" : "out-of-place")
       << "  warmup=" << o.warmup << "  iters=" << o.iters;
  for (const auto& [key, value] : info_.extra) out_ << "  " << key << "=" << value;
  out_ << "\n#\n"
       << format("# %12s %12s %6s %11s %11s %9s %9s %8s\n", "size", "count", "iters", "time", "min", "algbw",
                 "busbw", "#wrong")
       << format("# %12s %12s %6s %11s %11s %9s %9s %8s\n", "(B)", "(elements)", "", "(us)", "(us)", "(GB/s)",
                 "(GB/s)", "");
  out_.flush();
}

void Reporter::add(const ResultRow& r) {
  rows_.push_back(r);
  if (info_.options.json) return;
  const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  out_ << format("  %12zu %12zu %6d %11.2f %11.2f %9.3f %9.3f %8s\n", r.point.bytes, r.point.bytes / elem_size(info_.options.type),
                 r.point.iters, r.stats.mean_us, r.stats.min_us, r.algbw_gbps, r.busbw_gbps, wrong.c_str());
  out_.flush();
}

void Reporter::end() {
  std::int64_t wrong = 0;
  bool checked = false;
  double busbw_sum = 0;
  for (const auto& r : rows_) {
    if (r.wrong >= 0) checked = true;
    wrong += std::max<std::int64_t>(r.wrong, 0);
    busbw_sum += r.busbw_gbps;
  }
  const double avg_busbw = rows_.empty() ? 0 : busbw_sum / static_cast<double>(rows_.size());
  if (info_.options.json) {
    const auto& o = info_.options;
    nlohmann::json j = {
        {"program", info_.program},
        {"backend", info_.backend},
        {"op", to_string(o.collective)},
        {"ranks", info_.nranks},
        {"dtype", to_string(o.type)},
        {"reduce", to_string(o.reduce)},
        {"in_place", o.in_place || o.collective == Collective::Broadcast},
        {"warmup", o.warmup},
        {"iters", o.iters},
        {"checked", checked},
        {"wrong_total", checked ? nlohmann::json(wrong) : nlohmann::json()},
        {"avg_busbw_gbps", avg_busbw},
        {"extra", info_.extra},
    };
    j["results"] = nlohmann::json::array();
    for (const auto& r : rows_) j["results"].push_back(to_json(r, o.type));
    out_ << j.dump() << "\n";
  } else {
    if (checked) out_ << "# Out of bounds values : " << wrong << (wrong == 0 ? " OK" : " FAILED") << "\n";
    out_ << format("# Avg bus bandwidth    : %.3f GB/s\n", avg_busbw);
  }
  out_.flush();
}

}  // namespace kolo::bench
