// Built instead of the gloo communicator when KOLO_WITH_GLOO=OFF.
#include "comm/gloo/gloo_communicator.h"
#include "kolo/error.h"

namespace kolo::comm {

bool gloo_available() { return false; }

std::unique_ptr<MeshCommunicator> make_gloo_communicator(const MeshGroup&, store::StoreClient&, const MeshNetwork&,
                                                     const CommunicatorOptions&) {
  throw InvalidArgumentError("this job needs kolo's TCP (gloo) communicator, but kolo was built without it "
                             "(KOLO_WITH_GLOO=OFF); rebuild with -DKOLO_WITH_GLOO=ON (needs libgloo-dev)");
}

}  // namespace kolo::comm
