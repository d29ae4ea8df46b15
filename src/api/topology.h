// Where this process stands in the job, as the launcher told it.
#pragma once

#include <string>

namespace kolo {

struct Topology {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string job_id;      // names this job's shared-memory segments
  std::string store_addr;  // host:port of the rendezvous store; empty without one
  std::string secret;      // proves membership of the job to the store
};

// Reads KOLO_* (set by kolorun). Without them the process is a job of one.
// Throws InvalidArgumentError naming the variable for inconsistent values, and for
// launchers kolo cannot work with yet.
Topology topology_from_env();

}  // namespace kolo
