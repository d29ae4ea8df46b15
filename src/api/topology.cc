#include "api/topology.h"

#include <cctype>

#include "common/env.h"
#include "kolo/error.h"

namespace kolo {
namespace {

int require_int(const char* name, int fallback) {
  auto value = env::get_int(name, fallback);
  if (value < 0 || value > (1 << 24)) throw InvalidArgumentError(std::string(name) + "=" + std::to_string(value) + " is out of range");
  return static_cast<int>(value);
}

void check_below(const char* index_name, int index, const char* size_name, int size) {
  if (size < 1) throw InvalidArgumentError(std::string(size_name) + " must be at least 1");
  if (index >= size)
    throw InvalidArgumentError(std::string(index_name) + "=" + std::to_string(index) + " must be below " + size_name +
                               "=" + std::to_string(size));
}

}  // namespace

Topology topology_from_env() {
  Topology t;
  if (!env::get("KOLO_RANK")) {
    if (env::get("OMPI_COMM_WORLD_RANK") || env::get("PMI_RANK") || env::get("SLURM_PROCID")) {
      if (env::get_int("OMPI_COMM_WORLD_SIZE", 1) > 1 || env::get_int("PMI_SIZE", 1) > 1 ||
          env::get_int("SLURM_NTASKS", 1) > 1)
        throw InvalidArgumentError(
            "this process was started by mpirun or srun, which kolo cannot bootstrap from yet; start the job with "
            "kolorun -np N instead");
    }
    return t;  // a job of one
  }
  t.rank = require_int("KOLO_RANK", 0);
  if (!env::get("KOLO_SIZE")) throw InvalidArgumentError("KOLO_RANK is set but KOLO_SIZE is not");
  t.size = require_int("KOLO_SIZE", 1);
  t.local_rank = require_int("KOLO_LOCAL_RANK", t.rank);
  t.local_size = require_int("KOLO_LOCAL_SIZE", t.size);
  t.cross_rank = require_int("KOLO_CROSS_RANK", 0);
  t.cross_size = require_int("KOLO_CROSS_SIZE", 1);
  check_below("KOLO_RANK", t.rank, "KOLO_SIZE", t.size);
  check_below("KOLO_LOCAL_RANK", t.local_rank, "KOLO_LOCAL_SIZE", t.local_size);
  check_below("KOLO_CROSS_RANK", t.cross_rank, "KOLO_CROSS_SIZE", t.cross_size);
  if (t.local_size > t.size) throw InvalidArgumentError("KOLO_LOCAL_SIZE is larger than KOLO_SIZE");
  t.job_id = env::get_string("KOLO_JOB_ID", "");
  t.store_addr = env::get_string("KOLO_STORE_ADDR", "");
  t.secret = env::get_string("KOLO_SECRET", "");
  if (t.size > 1 && t.job_id.empty()) throw InvalidArgumentError("KOLO_JOB_ID must be set for a job of several ranks (kolorun sets it)");
  for (char c : t.job_id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_')
      throw InvalidArgumentError("KOLO_JOB_ID may contain only letters, digits, '-' and '_'");
  }
  if (!t.store_addr.empty() && t.secret.empty()) throw InvalidArgumentError("KOLO_STORE_ADDR is set but KOLO_SECRET is not");
  return t;
}

}  // namespace kolo
