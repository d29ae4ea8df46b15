// The rendezvous store for jobs that no kolorun started (srun, mpirun) and that
// were given no KOLO_STORE_ADDR: rank 0 serves the store itself and publishes its
// address and a fresh secret in a file that every rank can read (on a filesystem
// that every host shares); the other ranks wait for that file.
//
// The file is written atomically (rename), readable by its owner only (0600), and
// names the job, so a leftover from an earlier job is never taken for this one's.
// Readers refuse a file that another user owns or that others may read. Rank 0's
// store runs until the process exits, and the file is removed then.
#pragma once

#include <chrono>
#include <string>

#include "bootstrap/topology.h"

namespace kolo {

// Fills t.store_addr and t.secret. Rank 0 listens on KOLO_HOST_ADDR (all
// interfaces when unset) and advertises KOLO_HOST_ADDR or this host's name.
// Errors: TimeoutError when rank 0's file does not appear within `timeout`,
// InvalidArgumentError for an unsafe or malformed file.
void rendezvous_through_file(Topology& t, const std::string& path, std::chrono::milliseconds timeout);

}  // namespace kolo
