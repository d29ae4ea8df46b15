// --mpi: the job's ranks are started by Open MPI's mpirun instead of kolorun.
// kolorun still runs the store and supervises mpirun as one process; every rank
// starts as `kolorun --mpi-rank PROGRAM ARGS`, which turns mpirun's
// OMPI_COMM_WORLD_* variables into kolo's KOLO_* ones and execs PROGRAM.
// Values never go on mpirun's command line: variables travel as `-x NAME`, their
// values in mpirun's environment (KOLO_SECRET included).
#pragma once

#include <string>
#include <vector>

#include "options/options.h"
#include "plan/host_plan.h"
#include "plan/rank_environment.h"

namespace kolorun {

inline constexpr char kMpiRankFlag[] = "--mpi-rank";

struct MpiJob {
  std::vector<std::string> argv;  // mpirun and its arguments
  std::vector<std::string> env;   // mpirun's environment
};

MpiJob make_mpi_job(const LaunchOptions& options, const HostPlan& plan, const JobIdentity& job,
                    const std::vector<std::string>& environment, const std::string& kolorun_path);

// `kolorun --mpi-rank PROGRAM ARGS` inside an mpirun job; returns only on error.
int run_mpi_rank(const std::vector<std::string>& command);

}  // namespace kolorun
