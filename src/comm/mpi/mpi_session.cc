#include "comm/mpi/mpi_session.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>

#include "common/logging.h"
#include "kolo/error.h"

namespace kolo::comm::mpi_impl {
namespace {

std::atomic<bool> g_poisoned{false};
bool g_we_initialized = false;

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
  }
  return "an unknown thread level";
}

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (g_poisoned) {
    KOLO_LOG(Warning, "ending the MPI job with MPI_Abort: an MPI operation was abandoned after a failure or abort");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

}  // namespace

void ensure_mpi_initialized() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) throw InvalidArgumentError("KOLO_BACKEND=mpi: MPI was already finalized in this process");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    g_we_initialized = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    throw InvalidArgumentError(std::string("MPI provides only ") + thread_level_name(provided) +
                               ", but kolo calls MPI from its background thread and needs MPI_THREAD_SERIALIZED or "
                               "MPI_THREAD_MULTIPLE" +
                               (g_we_initialized ? " (this MPI library cannot)"
                                                 : " (call MPI_Init_thread with MPI_THREAD_MULTIPLE)"));
}

void mark_mpi_poisoned() { g_poisoned = true; }

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw PeerFailureError(-1, std::string(call) + " failed: " + std::string(text, length));
}

}  // namespace kolo::comm::mpi_impl
