// Which communicator a job uses, from where its ranks run and how they started.
#pragma once

#include <memory>

#include "api/topology.h"
#include "comm/communicator.h"
#include "store/store.h"

namespace kolo {

// `generation` counts init() calls (names must be fresh for each session);
// `store` is the job's rendezvous store client, null when the job has none.
std::unique_ptr<comm::Communicator> make_communicator(const Topology& topology, int generation,
                                                      store::StoreClient* store);

}  // namespace kolo
