// Reading rank, size, local and cross ranks from the environment that mpirun
// (OpenMPI, MPICH hydra) and Slurm's srun give their processes. The caller
// (topology_from_env) validates the values.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bootstrap/topology.h"

namespace kolo {

// Set when mpirun started this process (OMPI_COMM_WORLD_RANK, or PMI_RANK with
// hydra's MPI_LOCALRANKID). Cross rank and size come from the node count
// (OMPI_MCA_orte_num_nodes) assuming mpirun's default by-slot placement, which
// puts consecutive ranks on the same host; they are exact for that placement.
std::optional<Topology> topology_from_mpirun_env();

// Set when srun started this process (SLURM_PROCID and SLURM_STEP_ID).
std::optional<Topology> topology_from_slurm_env();

// Slurm's compressed task counts per node: "2(x3),1" -> {2, 2, 2, 1}. Throws
// InvalidArgumentError naming `what` for malformed text.
std::vector<int> parse_slurm_tasks_per_node(const std::string& text, const std::string& what);

// Letters, digits, '-' and '_' kept, anything else turned into '-', so that a
// launcher's job name can name shared-memory segments.
std::string sanitize_job_id(const std::string& text);

}  // namespace kolo
