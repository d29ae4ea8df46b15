// This test binary run again under mpirun: the tests that need MPI ranks start
// `mpirun -np N kolo_tests --gtest_filter=...` with KOLO_MPI_WORKER set, and the
// same tests, inside the MPI ranks, see in_mpi_worker() and do the rank's part.
#pragma once

#include <string>

namespace kolo::testing {

// Inside a rank that mpirun started for run_under_mpirun.
bool in_mpi_worker();

struct MpirunResult {
  int status = -1;  // as pclose() returns it; -1 when mpirun did not run
  std::string output;  // stdout and stderr of every rank, interleaved
  double seconds = 0;
};

// Runs this binary's tests matching `filter` on `ranks` MPI ranks of this host
// (killed after 120 s). `extra_env` is more of mpirun's arguments ("-x NAME=value").
MpirunResult run_under_mpirun(int ranks, const std::string& filter, const std::string& extra_env = "");

// How often `part` occurs in `text` ("[  PASSED  ] 1 test." once per rank).
int count_of(const std::string& text, const std::string& part);

}  // namespace kolo::testing
