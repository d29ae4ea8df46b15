// Built instead of the MPI communicator when KOLO_WITH_MPI=OFF.
#include "comm/mpi/mpi_communicator.h"
#include "kolo/error.h"

namespace kolo::comm {

bool mpi_available() { return false; }

std::unique_ptr<Communicator> make_mpi_communicator(const CommunicatorOptions&) {
  throw InvalidArgumentError("KOLO_BACKEND=mpi, but kolo was built without MPI (KOLO_WITH_MPI=OFF); rebuild with "
                             "-DKOLO_WITH_MPI=ON (needs libopenmpi-dev), or choose another KOLO_BACKEND");
}

}  // namespace kolo::comm
