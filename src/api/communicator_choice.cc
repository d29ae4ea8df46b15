#include "api/communicator_choice.h"

#include "comm/shm/shm_communicator.h"
#include "common/env.h"
#include "kolo/error.h"

namespace kolo {

std::unique_ptr<comm::Communicator> make_communicator(const Topology& t, int generation, store::StoreClient*) {
  if (t.size == 1) return comm::make_self_communicator();
  if (t.local_size != t.size)
    throw InvalidArgumentError("this job spans " + std::to_string(t.cross_size) +
                               " hosts, but kolo's TCP communicator is not available yet; run on one host");
  comm::CommunicatorOptions options;
  options.peer_timeout = env::get_seconds("KOLO_PEER_TIMEOUT", options.peer_timeout);
  options.connect_timeout = env::get_seconds("KOLO_START_TIMEOUT", options.connect_timeout);
  return comm::make_shm_communicator(t.rank, t.size, t.job_id + "-" + std::to_string(generation), options);
}

}  // namespace kolo
