#include "bootstrap/topology.h"

#include <cctype>

#include "bootstrap/launcher_env.h"
#include "bootstrap/rendezvous_file.h"
#include "comm/communicator.h"
#include "common/env.h"
#include "kolo/error.h"
#include "store/store.h"

namespace kolo {
namespace {

int require_int(const settings::Setting& setting, int fallback) { return static_cast<int>(setting.integer(fallback)); }

void check_below(const std::string& index_name, int index, const std::string& size_name, int size) {
  if (size < 1) throw InvalidArgumentError(size_name + " must be at least 1");
  if (index >= size)
    throw InvalidArgumentError(index_name + "=" + std::to_string(index) + " must be below " + size_name + "=" +
                               std::to_string(size));
}

// kolorun sets KOLO_LAUNCHER=kolorun for the ranks it starts and
// KOLO_LAUNCHER=mpirun for those that mpirun starts for it (--mpi); anything that
// sets KOLO_RANK by hand is taken as kolorun.
Launcher kolorun_launcher() {
  const std::string launcher = kLauncher.text("kolorun");
  if (launcher == "kolorun") return Launcher::Kolorun;
  if (launcher == "mpirun") return Launcher::KolorunMpi;
  throw InvalidArgumentError("KOLO_LAUNCHER='" + launcher + "' is not one of kolorun, mpirun");
}

Topology from_kolorun_env() {
  Topology t;
  t.launcher = kolorun_launcher();
  t.rank = require_int(kRank, 0);
  if (!kSize.value()) throw InvalidArgumentError("KOLO_RANK is set but KOLO_SIZE is not");
  t.size = require_int(kSize, 1);
  t.local_rank = require_int(kLocalRank, t.rank);
  t.local_size = require_int(kLocalSize, t.size);
  t.cross_rank = require_int(kCrossRank, 0);
  t.cross_size = require_int(kCrossSize, 1);
  t.job_id = kJobId.text();
  return t;
}

// Names the variables the launcher's values came from, for error messages.
struct Names {
  std::string rank, size, local_rank, local_size, cross_rank, cross_size;
};

Names names_for(Launcher launcher) {
  switch (launcher) {
    case Launcher::Mpirun:
      return {"mpirun's rank", "mpirun's size", "mpirun's local rank", "mpirun's local size", "host index",
              "host count"};
    case Launcher::Srun:
      return {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID",
              "SLURM_NNODES"};
    default:
      return {kRank.name, kSize.name, kLocalRank.name, kLocalSize.name, kCrossRank.name, kCrossSize.name};
  }
}

void validate(const Topology& t) {
  const Names n = names_for(t.launcher);
  check_below(n.rank, t.rank, n.size, t.size);
  check_below(n.local_rank, t.local_rank, n.local_size, t.local_size);
  check_below(n.cross_rank, t.cross_rank, n.cross_size, t.cross_size);
  if (t.local_size > t.size) throw InvalidArgumentError(n.local_size + " is larger than " + n.size);
  if (t.size > 1 && t.job_id.empty())
    throw InvalidArgumentError("KOLO_JOB_ID must be set for a job of several ranks (kolorun sets it)");
  for (char c : t.job_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      throw InvalidArgumentError("KOLO_JOB_ID may contain only letters, digits, '-' and '_'");
  }
  if (!t.store_addr.empty() && t.secret.empty()) throw InvalidArgumentError("KOLO_STORE_ADDR is set but KOLO_SECRET is not");
}

// mpirun and srun start no store: KOLO_STORE_ADDR/KOLO_SECRET may name one, else
// rank 0 serves one through the rendezvous file when asked to (or when a Slurm
// job spans nodes, where the TCP communicators need it).
void find_store(Topology& t) {
  t.store_addr = store::kStoreAddr.text();
  t.secret = store::kSecret.text();
  if (!t.store_addr.empty() || t.size == 1) return;
  std::string path = kRendezvousFile.text();
  if (path.empty() && t.launcher == Launcher::Srun && t.cross_size > 1)
    path = env::get_string("SLURM_SUBMIT_DIR", ".") + "/.kolo-rendezvous-" + t.job_id;
  if (path.empty()) return;
  auto timeout = comm::kStartTimeout.seconds();
  rendezvous_through_file(t, path, timeout);
}

}  // namespace

const char* to_string(Launcher launcher) {
  switch (launcher) {
    case Launcher::None: return "none";
    case Launcher::Kolorun: return "kolorun";
    case Launcher::KolorunMpi: return "kolorun --mpi";
    case Launcher::Mpirun: return "mpirun";
    case Launcher::Srun: return "srun";
  }
  return "?";
}

Topology topology_from_env() {
  if (kRank.value()) {
    Topology t = from_kolorun_env();
    t.store_addr = store::kStoreAddr.text();
    t.secret = store::kSecret.text();
    validate(t);
    return t;
  }
  auto launched = topology_from_mpirun_env();
  if (!launched) launched = topology_from_slurm_env();
  if (!launched) return Topology{};  // a job of one
  Topology t = *launched;
  // KOLO_JOB_ID still wins, e.g. to give several jobs distinct names by hand.
  t.job_id = kJobId.text(t.job_id);
  validate(t);
  find_store(t);
  return t;
}

}  // namespace kolo
