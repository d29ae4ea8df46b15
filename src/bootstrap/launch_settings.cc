// The variables a launcher sets for each rank, declared apart from the code that
// reads them so that kolorun's own parsers (and their fuzz targets) can name them
// without the rest of the bootstrap.
#include "bootstrap/launch_settings.h"

namespace kolo {
namespace {

using settings::Kind;

constexpr settings::Setting layout(const char* name, const char* doc) {
  return {.name = name, .kind = Kind::Integer, .fallback = "set by kolorun", .min = 0, .max = kMaxRanks, .doc = doc};
}

constexpr settings::Setting by_kolorun(const char* name, bool tools_only, const char* doc) {
  return {.name = name, .kind = Kind::Text, .fallback = "set by kolorun", .tools_only = tools_only, .doc = doc};
}

}  // namespace

KOLO_SETTING(kRank, layout("KOLO_RANK", "this process's rank in the job"));
KOLO_SETTING(kSize, layout("KOLO_SIZE", "the job's number of ranks"));
KOLO_SETTING(kLocalRank, layout("KOLO_LOCAL_RANK", "this rank's index among its host's ranks"));
KOLO_SETTING(kLocalSize, layout("KOLO_LOCAL_SIZE", "the number of ranks on this rank's host"));
KOLO_SETTING(kCrossRank, layout("KOLO_CROSS_RANK", "the index of this rank's host"));
KOLO_SETTING(kCrossSize, layout("KOLO_CROSS_SIZE", "the number of hosts"));
KOLO_SETTING(kJobId, by_kolorun("KOLO_JOB_ID", false, "names the job's shared-memory segments and processes"));
// Checked where it is read (only with KOLO_RANK): kolorun, or mpirun for `kolorun --mpi`.
KOLO_SETTING(kLauncher, by_kolorun("KOLO_LAUNCHER", false, "what started the ranks: kolorun or mpirun"));
KOLO_SETTING(kHostname, by_kolorun("KOLO_HOSTNAME", true, "the host kolorun placed the rank on"));
KOLO_SETTING(kCpuBind, by_kolorun("KOLO_CPU_BIND", true, "core: kolorun binds each rank to its share of the CPUs"));
KOLO_SETTING(kMpiHosts, by_kolorun("KOLO_MPI_HOSTS", true, "kolorun --mpi: the hosts of the job, for each rank's wrapper"));
KOLO_SETTING(kMpiHostAddrs,
             by_kolorun("KOLO_MPI_HOST_ADDRS", true, "kolorun --mpi: each host's KOLO_HOST_ADDR, for each rank's wrapper"));
KOLO_SETTING(kRendezvousFile, {.name = "KOLO_RENDEZVOUS_FILE", .kind = Kind::Text, .fallback = "unset",
                               .doc = "srun and mpirun jobs: a shared file through which rank 0 publishes its store"});

}  // namespace kolo
