#include "comm/gloo/gloo_communicator.h"

#include <signal.h>

#include "comm/direct/direct_communicator.h"
#include "comm/gloo/gloo_mesh.h"
#include "common/logging.h"

namespace kolo::comm {
namespace {

// libgloo writes to its sockets without MSG_NOSIGNAL, so a rank that sends to a
// peer that died would get SIGPIPE and die of it before it could report the
// PeerFailureError the communicator promises (naming the peer). A program that
// left SIGPIPE at its default gets it ignored; one that set a handler keeps it.
void keep_sigpipe_from_ending_the_rank() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  ::signal(SIGPIPE, SIG_IGN);
  KOLO_LOG(Debug, "SIGPIPE is ignored from now on: a write to a dead peer over gloo must fail, not end the rank");
}

}  // namespace

bool gloo_available() { return true; }

std::unique_ptr<MeshCommunicator> make_gloo_communicator(const MeshGroup& group, store::StoreClient& store,
                                                         const MeshNetwork& network,
                                                         const CommunicatorOptions& options) {
  keep_sigpipe_from_ending_the_rank();
  return std::make_unique<direct::DirectCommunicator<gloo_impl::Mesh>>("gloo", "KOLO_GLOO", direct::Tuning{}, group,
                                                                       store, network, options);
}

}  // namespace kolo::comm
