#include "bootstrap/launcher_env.h"

#include <cctype>

#include "common/env.h"
#include "kolo/error.h"

namespace kolo {
namespace {

int int_from(const char* name) {
  auto value = env::get(name);
  if (!value) throw InvalidArgumentError(std::string(name) + " is not set");
  return static_cast<int>(env::get_int_in(name, 0, 0, kMaxRanks));
}

int first_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (env::get(name)) return int_from(name);
  }
  return fallback;
}

// Host index and host count from the number of hosts, for placements that fill
// each host with consecutive ranks.
void derive_cross(Topology& t, int hosts) {
  if (hosts < 1) hosts = t.local_size > 0 ? (t.size + t.local_size - 1) / t.local_size : 1;
  t.cross_size = hosts;
  t.cross_rank = hosts == 1 ? 0 : std::min(hosts - 1, (t.rank - t.local_rank) / std::max(1, t.local_size));
}

}  // namespace

std::string sanitize_job_id(const std::string& text) {
  std::string out;
  for (char c : text) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '-';
  return out;
}

std::optional<Topology> topology_from_mpirun_env() {
  Topology t;
  t.launcher = Launcher::Mpirun;
  if (env::get("OMPI_COMM_WORLD_RANK")) {
    t.rank = int_from("OMPI_COMM_WORLD_RANK");
    t.size = int_from("OMPI_COMM_WORLD_SIZE");
    t.local_rank = first_int({"OMPI_COMM_WORLD_LOCAL_RANK"}, t.rank);
    t.local_size = first_int({"OMPI_COMM_WORLD_LOCAL_SIZE"}, t.size);
    derive_cross(t, first_int({"OMPI_MCA_orte_num_nodes"}, 0));
    t.job_id = "ompi-" + sanitize_job_id(env::get_string("OMPI_MCA_ess_base_jobid", env::get_string("PMIX_NAMESPACE", "job")));
    return t;
  }
  if (env::get("PMI_RANK") && env::get("MPI_LOCALRANKID")) {  // MPICH's hydra
    t.rank = int_from("PMI_RANK");
    t.size = int_from("PMI_SIZE");
    t.local_rank = int_from("MPI_LOCALRANKID");
    t.local_size = first_int({"MPI_LOCALNRANKS"}, t.size);
    derive_cross(t, 0);
    t.job_id = "mpich-" + sanitize_job_id(env::get_string("PMI_KVSNAME", env::get_string("PMI_JOBID", "job")));
    return t;
  }
  return std::nullopt;
}

std::vector<int> parse_slurm_tasks_per_node(const std::string& text, const std::string& what) {
  std::vector<int> counts;
  std::size_t pos = 0;
  auto bad = [&] { return InvalidArgumentError(what + "='" + text + "' is not Slurm's tasks-per-node list"); };
  while (pos < text.size()) {
    std::size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(pos, end - pos);
    int repeat = 1;
    auto paren = item.find("(x");
    if (paren != std::string::npos) {
      if (item.back() != ')') throw bad();
      repeat = static_cast<int>(env::parse_int(item.substr(paren + 2, item.size() - paren - 3), what));
      item = item.substr(0, paren);
    }
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos) throw bad();
    int count = static_cast<int>(env::parse_int(item, what));
    if (repeat < 1 || repeat > (1 << 20) || count < 1 || counts.size() + repeat > (1u << 20)) throw bad();
    counts.insert(counts.end(), repeat, count);
    pos = end + 1;
  }
  if (counts.empty()) throw bad();
  return counts;
}

std::optional<Topology> topology_from_slurm_env() {
  if (!env::get("SLURM_PROCID") || !env::get("SLURM_STEP_ID")) return std::nullopt;
  Topology t;
  t.launcher = Launcher::Srun;
  t.rank = int_from("SLURM_PROCID");
  t.size = first_int({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS"}, 1);
  t.local_rank = first_int({"SLURM_LOCALID"}, 0);
  t.cross_rank = first_int({"SLURM_NODEID"}, 0);
  t.cross_size = first_int({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1);
  const char* per_node_name = env::get("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
  if (auto per_node = env::get(per_node_name)) {
    auto counts = parse_slurm_tasks_per_node(*per_node, per_node_name);
    if (t.cross_rank >= static_cast<int>(counts.size()))
      throw InvalidArgumentError(std::string(per_node_name) + "='" + *per_node + "' lists no count for SLURM_NODEID=" +
                                 std::to_string(t.cross_rank));
    t.local_size = counts[t.cross_rank];
  } else {
    t.local_size = t.cross_size == 1 ? t.size : 1;
  }
  t.job_id = "slurm-" + sanitize_job_id(env::get_string("SLURM_JOB_ID", "job")) + "-" +
             sanitize_job_id(env::get_string("SLURM_STEP_ID", "0"));
  return t;
}

}  // namespace kolo
