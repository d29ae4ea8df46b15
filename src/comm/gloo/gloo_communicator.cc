#include "comm/gloo/gloo_communicator.h"

#include "comm/direct/direct_communicator.h"
#include "comm/gloo/gloo_mesh.h"

namespace kolo::comm {

bool gloo_available() { return true; }

std::unique_ptr<GlooCommunicator> make_gloo_communicator(const GlooGroup& group, store::StoreClient& store,
                                                         const GlooNetwork& network,
                                                         const CommunicatorOptions& options) {
  return std::make_unique<direct::DirectCommunicator<gloo_impl::Mesh>>("gloo", "KOLO_GLOO", group, store, network,
                                                                       options);
}

}  // namespace kolo::comm
