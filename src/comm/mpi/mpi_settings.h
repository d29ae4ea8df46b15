// The MPI communicator's settings, declared in every build: without MPI they
// are still known to init() and checked by it, as every transport's are.
#pragma once

#include "common/settings.h"

namespace kolo::comm::mpi_impl {

extern const settings::Setting kSmallBytes;  // KOLO_MPI_SMALL_BYTES
extern const settings::Setting kSpinUs;      // KOLO_MPI_SPIN_US (mpi_wait.h)
extern const settings::Setting kPollUs;      // KOLO_MPI_POLL_US

}  // namespace kolo::comm::mpi_impl
