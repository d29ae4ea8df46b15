// The variables a launcher sets for each rank (declared in launch_settings.cc).
#pragma once

#include "common/settings.h"

namespace kolo {

// The most ranks (and the highest rank, host or host count) a launcher may give.
inline constexpr int kMaxRanks = 1 << 24;

// The variables kolorun sets for each rank: its place in the job (KOLO_RANK, ...),
// the job's id and launcher, and those only kolorun's own code reads in a rank's
// environment (the host name, the CPU binding, the host plan of `kolorun --mpi`);
// and KOLO_RENDEZVOUS_FILE, set by hand for srun and mpirun jobs.
extern const settings::Setting kRank, kSize, kLocalRank, kLocalSize, kCrossRank, kCrossSize;
extern const settings::Setting kJobId, kLauncher, kRendezvousFile;
extern const settings::Setting kHostname, kCpuBind, kMpiHosts, kMpiHostAddrs;

}  // namespace kolo
