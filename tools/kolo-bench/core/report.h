// Results in nccl-tests' shape: one row per size with time, algbw and busbw, as a
// table for people or as one line of JSON for scripts (bench/compare.py).
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "bench_options.h"
#include "size_plan.h"

namespace kolo::bench {

struct Stats {
  double mean_us = 0;
  double median_us = 0;
  double min_us = 0;
  double max_us = 0;
};
Stats summarize(std::vector<double> times_us);

struct ResultRow {
  SizePoint point;
  Stats stats;
  double algbw_gbps = 0;  // bytes / mean time, 1 GB = 1e9 bytes
  double busbw_gbps = 0;  // algbw x bus factor
  std::int64_t wrong = -1;  // -1 when not checked
};
ResultRow make_row(const SizePoint& point, const Stats& stats, Collective c, int nranks, std::int64_t wrong);

// What ran, for the report's header.
struct RunInfo {
  std::string program;   // "kolo-bench", "mpi_bench", "gloo_bench"
  std::string backend;   // "kolo-comm", "kolo-api", "mpi", "gloo-ring", ...
  int nranks = 1;
  BenchOptions options;
  std::map<std::string, std::string> extra;  // backend details (communicator name, algorithm)
};

class Reporter {
 public:
  Reporter(std::ostream& out, RunInfo info);
  void begin();
  void add(const ResultRow& row);
  void end();

 private:
  std::ostream& out_;
  RunInfo info_;
  std::vector<ResultRow> rows_;
};

}  // namespace kolo::bench
