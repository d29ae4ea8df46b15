// Which CPUs each rank started on this host may run on (kolorun --bind-to).
//
// Like mpirun's default binding, and for the same reasons: a rank that stays on
// its own cores keeps its caches, is not migrated while it spin-waits in a
// collective (small allreduces on a busy machine suffer most from that), and its
// thread pools (OpenMP, libtorch) size themselves to its share instead of every
// rank starting one thread per CPU of the machine.
#pragma once

#include <string>
#include <vector>

namespace kolorun {

enum class CpuBinding { Core, None };

// "core" or "none"; throws UsageError for anything else.
CpuBinding parse_cpu_binding(const std::string& flag, const std::string& value);
const char* cpu_binding_name(CpuBinding binding);

// Local rank `local_rank` of `local_size` gets an equal, contiguous share of
// `allowed` (the first ranks one more CPU when they do not divide evenly). Empty
// when the ranks outnumber the CPUs: then binding would only stack them.
std::vector<int> cpu_share(const std::vector<int>& allowed, int local_rank, int local_size);

// The CPUs kolorun itself may run on (its affinity mask), in increasing order.
std::vector<int> allowed_cpus();

// The share for a rank from its environment ("NAME=value" entries): KOLO_CPU_BIND
// (set by kolorun), KOLO_LOCAL_RANK and KOLO_LOCAL_SIZE. Empty: leave it unbound.
std::vector<int> cpus_for_rank(const std::vector<std::string>& env);

}  // namespace kolorun
