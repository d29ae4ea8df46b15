// MPI's process-wide state: initialized once, finalized at exit.
#pragma once

#include <mpi.h>

namespace kolo::comm::mpi_impl {

// Initializes MPI unless the program did (then checks its thread level), and
// registers the finalization at exit. Throws InvalidArgumentError when MPI is
// unusable from kolo's background thread.
void ensure_mpi_initialized();

// A request was abandoned (abort, timeout): MPI_Finalize could wait forever for
// it, so the process ends through MPI_Abort instead, which also ends the job.
void mark_mpi_poisoned();

// Throws PeerFailureError (rank unknown) with MPI's text for a failed call.
void check_mpi(int code, const char* call);

}  // namespace kolo::comm::mpi_impl
