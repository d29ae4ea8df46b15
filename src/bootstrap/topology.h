// Where this process stands in the job, as its launcher told it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bootstrap/launch_settings.h"

namespace kolo {

// Who started the processes of the job.
enum class Launcher {
  None,     // no launcher: a job of one
  Kolorun,  // KOLO_RANK, KOLO_SIZE, ... (kolorun, or anything that sets them)
  // `kolorun --mpi`: mpirun started the processes (so MPI_COMM_WORLD is the job)
  // and kolorun's rank wrapper set KOLO_RANK, ... and KOLO_LAUNCHER=mpirun.
  KolorunMpi,
  Mpirun,   // OpenMPI's mpirun (OMPI_COMM_WORLD_*) or MPICH's hydra (PMI_*, MPI_LOCAL*)
  Srun,     // Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, ...)
};

const char* to_string(Launcher launcher);

// mpirun started every process of the job (directly or for `kolorun --mpi`), so
// that MPI_COMM_WORLD holds exactly the job's ranks.
inline bool started_by_mpirun(Launcher launcher) {
  return launcher == Launcher::Mpirun || launcher == Launcher::KolorunMpi;
}

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  Launcher launcher = Launcher::None;
  std::string job_id;      // names this job's shared-memory segments
  std::string store_addr;  // host:port of the rendezvous store; empty without one
  std::string secret;      // proves membership of the job to the store
  // Empty when the ranks above are the job's own; for a world made of some of the
  // job's ranks (init with a list of ranks, world.h) the job rank of each of its
  // ranks. Such a world is not MPI_COMM_WORLD.
  std::vector<int> job_ranks;
  bool whole_job() const { return job_ranks.empty(); }
  // Whether every host runs as many of these ranks, where this rank learned
  // every rank's host (an elastic membership, a world); nullopt elsewhere.
  std::optional<bool> hosts_alike;
};

// Reads the launcher's environment: KOLO_* (kolorun; KOLO_LAUNCHER=mpirun for
// `kolorun --mpi`) first, then mpirun's, then Slurm's. Without any the process is
// a job of one. The store comes from KOLO_STORE_ADDR / KOLO_SECRET, or, for mpirun and srun jobs without them, from
// the rendezvous file (rendezvous_file.h) when KOLO_RENDEZVOUS_FILE is set or a
// Slurm job spans nodes. Throws InvalidArgumentError naming the variable for
// missing or inconsistent values.
Topology topology_from_env();


}  // namespace kolo
