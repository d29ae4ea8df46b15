// Which communicator a job, or a process set of it, uses: the first transport of
// a table (communicator_choice.cc) that fits where its ranks run, how they
// started and what KOLO_BACKEND and KOLO_HIERARCHICAL ask for. In priority order:
//
//   mpi           started by mpirun (and kolo built with MPI), the whole job;
//                 or KOLO_BACKEND=mpi. Never a process set.
//   shm           every member on one host (KOLO_BACKEND=auto or shm). For the
//                 world, KOLO_HIERARCHICAL=1 passes it over; KOLO_BACKEND=shm
//                 across hosts is an error (a set goes over the network).
//   hierarchical  shm inside hosts, the network between them: by default across
//                 hosts; with KOLO_BACKEND=tcp or gloo when KOLO_HIERARCHICAL=1
//                 asks. It needs as many members on every host, numbered host
//                 by host: otherwise the world falls back to the flat network
//                 with a warning (an error when forced) and a set does so
//                 silently; a set with one member per host is flat.
//   tcp           kolo's own sockets between all members (KOLO_HIERARCHICAL=0
//                 across hosts, KOLO_BACKEND=tcp, what the others leave).
//   gloo          TCP on gloo's transport, only when KOLO_BACKEND=gloo.
//
// KOLO_NUM_SERVERS=K (K > 0) wraps the world's choice: allreduce goes through K
// parameter servers, everything else stays on it (comm/ps). gloo, tcp and
// hierarchical need the rendezvous store.
#pragma once

#include <memory>
#include <vector>

#include "bootstrap/topology.h"
#include "comm/communicator.h"
#include "store/store.h"

namespace kolo {

// Whether make_communicator(topology, ...) would give a communicator that works
// in shared buffers (shared memory between every rank), without making one: for
// a new elastic worker, which learns its communicator only once it is taken in.
bool shares_buffers(const Topology& topology);

// `generation` counts init() calls (names must be fresh for each session);
// `store` is the job's rendezvous store client, null when the job has none; it
// must outlive the communicator.
std::unique_ptr<comm::Communicator> make_communicator(const Topology& topology, int generation,
                                                      store::StoreClient* store);

// The communicator of process set `set_id` among its members `ranks` (job ranks,
// ascending, this rank among them) on `hosts` (each member's cross rank), from
// the same table as the world's. Its ranks are the members' indices in `ranks`.
std::unique_ptr<comm::Communicator> make_set_communicator(const Topology& topology, int generation,
                                                          store::StoreClient* store, int set_id,
                                                          const std::vector<int>& ranks,
                                                          const std::vector<int>& hosts);

}  // namespace kolo
