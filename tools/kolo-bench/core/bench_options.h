// The command line every benchmark program shares (kolo-bench, mpi_bench,
// gloo_bench), so that a script can give all of them the same flags.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bench_types.h"

namespace kolo::bench {

struct BenchOptions {
  Collective collective = Collective::Allreduce;
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{256} << 20;
  // Each size is the previous one times this (nccl-tests' -f).
  double step_factor = 2.0;
  // When given, exactly these sizes (ascending) instead of min/max/step.
  std::vector<std::size_t> sizes;
  ElemType type = ElemType::Float32;
  ReduceKind reduce = ReduceKind::Sum;
  // Allreduce only: the result overwrites the input.
  bool in_place = false;
  int warmup = 5;
  int iters = 20;
  // When nonzero, sizes whose iters x bytes exceed this run fewer iterations (at
  // least 2, with 1 warmup), so that a sweep up to 256 MiB stays short.
  std::size_t budget_bytes = 0;
  bool check = false;
  // One line of JSON on rank 0 instead of the table.
  bool json = false;
  int root = 0;
  bool show_help = false;
};

// A flag one program adds to the common ones (kolo-bench's --mode, gloo's --algorithm).
struct ExtraFlag {
  std::string name;  // "--mode"
  std::string value_name;  // "api|comm"; empty for a flag without value
  std::string help;
  std::function<void(const std::string& value)> apply;
};

// Throws UsageError naming the flag for anything malformed or inconsistent.
BenchOptions parse_bench_options(const std::vector<std::string>& args, std::span<const ExtraFlag> extras = {});
std::string bench_usage(const std::string& program, const std::string& summary, std::span<const ExtraFlag> extras = {});

// "4096", "4K", "256M", "1G" (powers of 1024).
std::size_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace kolo::bench
