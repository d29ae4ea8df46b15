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

}  // namespace kolo::comm
