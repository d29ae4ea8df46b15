#include "bench_options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace kolo::bench {
namespace {

constexpr std::size_t kMaxBytes = std::size_t{16} << 30;

long long parse_int(const std::string& text, const std::string& flag, long long min, long long max) {
  long long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || value < min || value > max)
    throw UsageError(flag + " needs a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
                     ", got '" + text + "'");
  return value;
}

using Setter = std::function<void(BenchOptions&, const std::string& flag, const std::string& value)>;

struct CommonFlag {
  const char* name;
  const char* value_name;
  const char* help;
  Setter apply;
};

const std::vector<CommonFlag>& common_flags() {
  static const std::vector<CommonFlag> flags = {
      {"--op", "allreduce|allgather|broadcast|alltoall|reducescatter", "collective to time (allreduce)",
       [](BenchOptions& o, const std::string&, const std::string& v) { o.collective = parse_collective(v); }},
      {"--min-bytes", "BYTES", "smallest size, K/M/G suffixes allowed (8)",
       [](BenchOptions& o, const std::string& f, const std::string& v) { o.min_bytes = parse_byte_size(v, f); }},
      {"--max-bytes", "BYTES", "largest size (256M)",
       [](BenchOptions& o, const std::string& f, const std::string& v) { o.max_bytes = parse_byte_size(v, f); }},
      {"--sizes", "LIST", "exactly these sizes, ascending, comma-separated (e.g. 8,4K,64M)",
       [](BenchOptions& o, const std::string& f, const std::string& v) {
         o.sizes.clear();
         std::size_t start = 0;
         while (start <= v.size()) {
           const std::size_t comma = std::min(v.find(',', start), v.size());
           o.sizes.push_back(parse_byte_size(v.substr(start, comma - start), f));
           start = comma + 1;
         }
       }},
      {"--step-factor", "F", "each size is the previous one times F (2)",
       [](BenchOptions& o, const std::string& f, const std::string& v) {
         char* end = nullptr;
         double x = std::strtod(v.c_str(), &end);
         if (v.empty() || end != v.c_str() + v.size() || !std::isfinite(x) || x <= 1.0 || x > 1024.0)
           throw UsageError(f + " needs a number above 1 (at most 1024), got '" + v + "'");
         o.step_factor = x;
       }},
      {"--dtype", "float32|float64|float16|bfloat16|int32|int64|int8|uint8", "element type (float32)",
       [](BenchOptions& o, const std::string&, const std::string& v) { o.type = parse_elem_type(v); }},
      {"--reduce", "sum|avg|min|max", "reduction of allreduce and reducescatter (sum)",
       [](BenchOptions& o, const std::string&, const std::string& v) { o.reduce = parse_reduce_kind(v); }},
      {"--in-place", "", "allreduce into its input buffer",
       [](BenchOptions& o, const std::string&, const std::string&) { o.in_place = true; }},
      {"--warmup", "N", "untimed iterations per size (5)",
       [](BenchOptions& o, const std::string& f, const std::string& v) {
         o.warmup = static_cast<int>(parse_int(v, f, 0, 1000000));
       }},
      {"--iters", "N", "timed iterations per size (20)",
       [](BenchOptions& o, const std::string& f, const std::string& v) {
         o.iters = static_cast<int>(parse_int(v, f, 1, 1000000));
       }},
      {"--budget-bytes", "BYTES", "cap iters x size per size, for quick sweeps (0: no cap)",
       [](BenchOptions& o, const std::string& f, const std::string& v) { o.budget_bytes = parse_byte_size(v, f); }},
      {"--root", "RANK", "broadcast root (0)",
       [](BenchOptions& o, const std::string& f, const std::string& v) {
         o.root = static_cast<int>(parse_int(v, f, 0, 1 << 20));
       }},
      {"--check", "", "verify every rank's result once per size",
       [](BenchOptions& o, const std::string&, const std::string&) { o.check = true; }},
      {"--json", "", "print one line of JSON (rank 0) instead of the table",
       [](BenchOptions& o, const std::string&, const std::string&) { o.json = true; }},
  };
  return flags;
}

void validate(const BenchOptions& o) {
  if (o.min_bytes == 0) throw UsageError("--min-bytes must be at least 1");
  for (std::size_t i = 0; i < o.sizes.size(); ++i) {
    if (o.sizes[i] == 0) throw UsageError("--sizes must be at least 1 byte each");
    if (i > 0 && o.sizes[i] <= o.sizes[i - 1]) throw UsageError("--sizes must be in ascending order");
  }
  if (o.min_bytes > o.max_bytes) throw UsageError("--min-bytes is larger than --max-bytes");
  if (o.in_place && o.collective != Collective::Allreduce)
    throw UsageError("--in-place applies to allreduce only (broadcast is always in place)");
  if (o.reduce != ReduceKind::Sum && !is_reduction(o.collective))
    throw UsageError(std::string("--reduce does not apply to ") + to_string(o.collective));
}

}  // namespace

std::size_t parse_byte_size(const std::string& text, const std::string& flag) {
  std::string digits = text;
  std::size_t scale = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': scale = std::size_t{1} << 10; break;
      case 'M': case 'm': scale = std::size_t{1} << 20; break;
      case 'G': case 'g': scale = std::size_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) digits.pop_back();
  }
  auto value = static_cast<std::size_t>(parse_int(digits, flag, 0, static_cast<long long>(kMaxBytes)));
  if (value > kMaxBytes / scale) throw UsageError(flag + " '" + text + "' is larger than 16G");
  return value * scale;
}

BenchOptions parse_bench_options(const std::vector<std::string>& args, std::span<const ExtraFlag> extras) {
  BenchOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::string value;
    bool has_inline_value = false;
    if (auto eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
      has_inline_value = true;
    }
    if (flag == "-h" || flag == "--help") {
      options.show_help = true;
      continue;
    }
    auto take_value = [&](bool wants_value) {
      if (!wants_value) {
        if (has_inline_value) throw UsageError(flag + " takes no value");
        return;
      }
      if (has_inline_value) return;
      if (i + 1 >= args.size()) throw UsageError(flag + " needs a value");
      value = args[++i];
    };
    bool known = false;
    for (const auto& f : common_flags()) {
      if (flag != f.name) continue;
      take_value(*f.value_name != '\0');
      f.apply(options, flag, value);
      known = true;
    }
    for (const auto& f : extras) {
      if (known || flag != f.name) continue;
      take_value(!f.value_name.empty());
      f.apply(value);
      known = true;
    }
    if (!known) throw UsageError("unknown argument '" + args[i] + "' (see --help)");
  }
  validate(options);
  return options;
}

std::string bench_usage(const std::string& program, const std::string& summary, std::span<const ExtraFlag> extras) {
  std::string text = "usage: " + program + " [flags]\n" + summary + "\n\nflags:\n";
  auto line = [&](const std::string& name, const std::string& value_name, const std::string& help) {
    std::string left = "  " + name + (value_name.empty() ? "" : " " + value_name);
    text += left + "\n      " + help + "\n";
  };
  for (const auto& f : common_flags()) line(f.name, f.value_name, f.help);
  for (const auto& f : extras) line(f.name, f.value_name, f.help);
  line("-h, --help", "", "this text");
  return text;
}

}  // namespace kolo::bench
