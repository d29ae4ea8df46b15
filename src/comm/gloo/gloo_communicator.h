// The gloo communicator: collectives between ranks on any hosts over TCP, built
// on the transport of Debian's libgloo (its full-mesh rendezvous, TCP pairs and
// unbound buffers). kolo's own algorithms run on top (gloo_collectives.cc), so
// that reductions give the same bits as the shared-memory communicator and a
// failure names the rank at fault. No gloo header leaks out of src/comm/gloo.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "store/store.h"

namespace kolo::comm {

// Where this rank's TCP endpoints listen (peers connect to that address).
struct GlooNetwork {
  // An address of this host the peers can reach (KOLO_HOST_ADDR); wins over iface.
  std::string host_addr;
  // A network interface whose address to use (KOLO_IFACE).
  std::string iface;
  // Every rank of the job runs on this host: loopback serves when neither is set.
  bool all_local = true;

  // KOLO_HOST_ADDR and KOLO_IFACE from the environment.
  static GlooNetwork from_env(bool all_local);
};

// One set of ranks joined by a full mesh of TCP connections.
struct GlooGroup {
  int rank = 0;
  int size = 1;
  // Rendezvous keys of this group live under it; unique per job, init() generation
  // and group (e.g. "gloo/0/world/").
  std::string key_prefix;
};

// False when kolo was built with KOLO_WITH_GLOO=OFF.
bool gloo_available();

// Connects the group (every member calls this with the same prefix and size) and
// returns its communicator, named "gloo". `store` carries the rendezvous and, when
// a peer fails, the verdict on which rank failed first; it must outlive the
// communicator. Errors: InvalidArgumentError (bad rank/size, unusable address or
// interface), TimeoutError (a member did not show up within connect_timeout),
// PeerFailureError (a member failed while connecting).
std::unique_ptr<Communicator> make_gloo_communicator(const GlooGroup& group, store::StoreClient& store,
                                                     const GlooNetwork& network, const CommunicatorOptions& options);

}  // namespace kolo::comm
