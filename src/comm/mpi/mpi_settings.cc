#include "comm/mpi/mpi_settings.h"

#include "common/env.h"

namespace kolo::comm::mpi_impl {

using settings::Kind;

// It chooses between two ways of running an allreduce: ranks that disagree would
// call different MPI collectives.
KOLO_SETTING(kSmallBytes, {.name = "KOLO_MPI_SMALL_BYTES", .kind = Kind::Integer, .fallback = "64K", .min = 0,
                           .max = env::kMaxSettingBytes, .scope = settings::Scope::AllRanks,
                           .doc = "mpi: an allreduce up to this size is an allgather and a local reduction"});
// Up to a second, as KOLO_TCP_SPIN_US.
KOLO_SETTING(kSpinUs, {.name = "KOLO_MPI_SPIN_US", .kind = Kind::Integer, .fallback = "500", .min = 0,
                       .max = 1000000, .doc = "mpi: microseconds a wait tests back to back before it polls"});
KOLO_SETTING(kPollUs, {.name = "KOLO_MPI_POLL_US", .kind = Kind::Integer, .fallback = "100", .min = 0,
                       .max = 1000000, .doc = "mpi: microseconds between tests once a wait polls"});

}  // namespace kolo::comm::mpi_impl
