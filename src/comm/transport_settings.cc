#include "comm/transport_settings.h"

#include "comm/direct/direct_collectives.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/ps/ps_settings.h"
#include "comm/shm/shm_communicator.h"
#include "comm/tcp/tcp_connect.h"
#include "comm/tcp/tcp_mesh.h"

namespace kolo::comm {

void check_transport_settings() {
  check_shm_settings();
  direct::Tuning::from_env("KOLO_TCP");
  direct::Tuning::from_env("KOLO_GLOO");
  tcp::spin_from_env();
  tcp::congestion_from_env();
  check_mpi_settings();
  ps::PsSettings::from_env();
}

}  // namespace kolo::comm
