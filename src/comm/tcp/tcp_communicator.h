// kolo's own TCP communicator: collectives between ranks on any hosts over plain
// sockets, one authenticated connection per pair of ranks, driven by the calling
// thread (tcp_mesh.h), with kolo's direct collectives on top (the same algorithms
// and bits as the gloo communicator, and as shared memory). KOLO_BACKEND=tcp.
#pragma once

#include <memory>
#include <string>

#include "comm/mesh/mesh_communicator.h"
#include "store/store.h"

namespace kolo::comm {

// Connects the group (every member calls this with the same prefix and size) and
// returns its communicator, named "tcp"; a MeshCommunicator, so that the
// hierarchical communicator can compose it. `secret` is the job's (every
// connection proves it); `store` carries the rendezvous and the failure verdict
// and must outlive the communicator. Errors name job ranks: InvalidArgumentError
// (bad rank or size, an unusable address or interface), TimeoutError (a member
// did not show up within connect_timeout), PeerFailureError (a member failed
// while connecting).
std::unique_ptr<MeshCommunicator> make_tcp_communicator(const MeshGroup& group, store::StoreClient& store,
                                                        const MeshNetwork& network, const CommunicatorOptions& options,
                                                        const std::string& secret);

}  // namespace kolo::comm
