// The gloo communicator: collectives between ranks on any hosts over TCP, built
// on the transport of Debian's libgloo (its full-mesh rendezvous, TCP pairs and
// unbound buffers). kolo's own algorithms run on top (comm/direct/direct_collectives.h), so
// that reductions give the same bits as the shared-memory communicator and a
// failure names the rank at fault. No gloo header leaks out of src/comm/gloo,
// and nothing outside it but the communicator choice includes this one.
#pragma once

#include <memory>

#include "comm/mesh/mesh_communicator.h"
#include "store/store.h"

namespace kolo::comm {

// False when kolo was built with KOLO_WITH_GLOO=OFF.
bool gloo_available();

// Connects the group (every member calls this with the same prefix and size) and
// returns its communicator, named "gloo". `store` carries the rendezvous and, when
// a peer fails, the verdict on which rank failed first; it must outlive the
// communicator. Errors name job ranks. Errors: InvalidArgumentError (bad rank/size, unusable address or
// interface), TimeoutError (a member did not show up within connect_timeout),
// PeerFailureError (a member failed while connecting).
std::unique_ptr<MeshCommunicator> make_gloo_communicator(const MeshGroup& group, store::StoreClient& store,
                                                     const MeshNetwork& network, const CommunicatorOptions& options);

}  // namespace kolo::comm
