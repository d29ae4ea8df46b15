// The MPI communicator: every collective (and so the engine's negotiation) on
// MPI, for jobs started by mpirun (OpenMPI or MPICH). No MPI header leaks out of
// src/comm/mpi.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace kolo::comm {

// False when kolo was built with KOLO_WITH_MPI=OFF.
bool mpi_available();

// Joins MPI_COMM_WORLD (a private duplicate of it). Initializes MPI with
// MPI_THREAD_MULTIPLE unless the program already did (it must have asked for at
// least MPI_THREAD_SERIALIZED: kolo calls MPI from one thread at a time, whichever
// runs a cycle, docs/thread_model.md), and then finalizes it at exit. Tunables: KOLO_MPI_SPIN_US, KOLO_MPI_POLL_US,
// KOLO_MPI_SMALL_BYTES (mpi_settings.h).
std::unique_ptr<Communicator> make_mpi_communicator(const CommunicatorOptions& options);

}  // namespace kolo::comm
