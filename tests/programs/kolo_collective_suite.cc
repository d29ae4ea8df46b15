// kolo_collective_suite: the public-API collective suite of
// tests/harness/collective_suite.h as a program of its own, for jobs started by
// kolorun (on one host or across hosts) or by mpirun:
//
//   kolorun -np 4 -H a:2,b:2 kolo_collective_suite [--large-bytes N] [--wrong-inputs-on-rank R]
//       [--through-a-process-set]
//
// Every collective x dtype x size {0, 1, 7919, N bytes (default 1 MiB), 3x the
// fusion threshold}, then barrier, grouped allreduce and join. KOLO_FUSION_THRESHOLD
// is lowered to 64K unless the environment sets it, so that the largest size
// exceeds it. Each failed check prints one line on stderr,
//   kolo_collective_suite: rank R: allreduce.float16.7919.sum (sum) element 5: got 3, want 4
// and the program exits with 1 when any check failed, 2 on a kolo error (which
// it names), 0 after "rank R of N: passed ..." on stdout. --wrong-inputs-on-rank
// makes rank R's allreduce inputs differ from what the references assume, to see
// the suite catch wrong results. --through-a-process-set runs the sweep through
// a process set of every rank (its own communicator), the rest in the global set.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <string>
#include <vector>

#include "common/env.h"
#include "harness/collective_suite.h"
#include "kolo/kolo.h"

namespace {

constexpr char kProgram[] = "kolo_collective_suite";

constexpr char kUsage[] = " [--large-bytes N] [--wrong-inputs-on-rank R] [--through-a-process-set]";

// Settings from the command line; the fusion threshold from the environment.
kolo::testing::SuiteSettings settings_from(int argc, char** argv, bool& through_a_set) {
  kolo::testing::SuiteSettings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--through-a-process-set") {
      through_a_set = true;
      continue;
    }
    if (i + 1 >= argc) throw kolo::InvalidArgumentError(arg + " needs a value; usage: " + kProgram + kUsage);
    if (arg == "--large-bytes") {
      settings.large_bytes = kolo::env::parse_int(argv[++i], arg);
      if (settings.large_bytes <= 0) throw kolo::InvalidArgumentError("--large-bytes needs a positive size");
    } else if (arg == "--wrong-inputs-on-rank") {
      settings.wrong_inputs_rank = static_cast<int>(kolo::env::parse_int(argv[++i], arg));
    } else {
      throw kolo::InvalidArgumentError("unknown argument '" + arg + "'; usage: " + kProgram + kUsage);
    }
  }
  ::setenv("KOLO_FUSION_THRESHOLD", "64K", /*overwrite=*/0);
  settings.fusion_threshold = kolo::env::get_int("KOLO_FUSION_THRESHOLD", 0);
  return settings;
}

int run(int argc, char** argv) {
  bool through_a_set = false;
  kolo::testing::SuiteSettings settings = settings_from(argc, argv, through_a_set);
  kolo::init();
  const int rank = kolo::rank();
  std::vector<int> everyone(static_cast<std::size_t>(kolo::size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  if (through_a_set) settings.process_set = kolo::add_process_set(everyone);
  kolo::testing::SuiteFailures failures([rank](const std::string& message) {
    std::fprintf(stderr, "%s: rank %d: %s\n", kProgram, rank, message.c_str());
  });
  const int cases = kolo::testing::sweep_every_collective(settings, failures);
  kolo::testing::check_barrier_grouped_and_join(failures);
  const int size = kolo::size(), local_size = kolo::local_size(), hosts = kolo::cross_size();
  kolo::shutdown();
  if (failures.count() > 0) {
    std::fprintf(stderr, "%s: rank %d: %d checks failed\n", kProgram, rank, failures.count());
    return 1;
  }
  std::printf("rank %d of %d: passed %d dtype x size cases of every collective%s, barrier, grouped allreduce and "
              "join (%d ranks on this host, %d hosts)\n",
              rank, size, cases, through_a_set ? " (through a process set of every rank)" : "", local_size, hosts);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", kProgram, e.what());
    return 2;
  }
}
