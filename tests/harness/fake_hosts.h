// Hosts simulated on this machine: a rank is told (KOLO_LOCAL_*, KOLO_CROSS_*)
// that it runs on one of several hosts, so the communicator choice and the
// hierarchical communicator split the job as they would across real hosts.
#pragma once

#include <cstdlib>
#include <string>

namespace kolo::testing {

// In a rank: local rank rank % per_host on host rank / per_host.
inline void place_on_fake_host(int rank, int per_host, int hosts) {
  ::setenv("KOLO_LOCAL_RANK", std::to_string(rank % per_host).c_str(), 1);
  ::setenv("KOLO_LOCAL_SIZE", std::to_string(per_host).c_str(), 1);
  ::setenv("KOLO_CROSS_RANK", std::to_string(rank / per_host).c_str(), 1);
  ::setenv("KOLO_CROSS_SIZE", std::to_string(hosts).c_str(), 1);
}

}  // namespace kolo::testing
