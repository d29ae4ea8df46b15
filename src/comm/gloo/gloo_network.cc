#include "comm/gloo/gloo_communicator.h"

#include "common/env.h"

namespace kolo::comm {

GlooNetwork GlooNetwork::from_env(bool all_local) {
  GlooNetwork network;
  network.host_addr = env::get_string("KOLO_HOST_ADDR", "");
  network.iface = env::get_string("KOLO_IFACE", "");
  network.all_local = all_local;
  return network;
}

int GlooGroup::job_rank(int group_rank) const {
  if (group_rank < 0 || job_ranks.empty() || group_rank >= static_cast<int>(job_ranks.size())) return group_rank;
  return job_ranks[group_rank];
}

}  // namespace kolo::comm
