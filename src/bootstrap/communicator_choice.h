// Which communicator a job uses, from where its ranks run and how they started.
//
//   KOLO_BACKEND=auto (default)
//     started by mpirun (and kolo built with MPI)      -> mpi (the whole job only,
//                                                        not a world of some of its ranks)
//     every rank on one host                            -> shm
//     ranks on several hosts                            -> hierarchical (shm + tcp)
//   KOLO_BACKEND=shm    shm; an error when the job spans hosts
//   KOLO_BACKEND=gloo   gloo (TCP) between all ranks, also on one host
//   KOLO_BACKEND=tcp    kolo's own TCP sockets between all ranks, also on one host
//   KOLO_BACKEND=mpi    mpi; the ranks must have been started by mpirun
//   KOLO_HIERARCHICAL=0 gives flat tcp instead of hierarchical across hosts;
//   KOLO_HIERARCHICAL=1 forces hierarchical (also on one host, and with
//                        KOLO_BACKEND=gloo or tcp, which then joins the
//                        hosts). mpi ignores it.
//   KOLO_NUM_SERVERS=K (K > 0) wraps the choice: allreduce goes through K
//                        parameter servers, everything else stays on it (comm/ps).
// hierarchical needs the same number of ranks on every host, numbered host by
// host; for other layouts auto falls back to flat tcp (with a warning) and a forced
// KOLO_HIERARCHICAL=1 is an error. gloo, tcp and hierarchical need the rendezvous
// store.
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
// ascending, this rank among them) on `hosts` (each member's cross rank): shared
// memory when the members share a host (unless KOLO_BACKEND asks for TCP), else
// kolo's TCP communicator between the members (Gloo's with KOLO_BACKEND=gloo),
// composed with shared memory inside each host (hierarchical) when every host
// holds as many members as the others, more than one, and hierarchical is the
// world's default or KOLO_HIERARCHICAL=1 asks for it.
// Its ranks are the members' indices in `ranks`.
std::unique_ptr<comm::Communicator> make_set_communicator(const Topology& topology, int generation,
                                                          store::StoreClient* store, int set_id,
                                                          const std::vector<int>& ranks,
                                                          const std::vector<int>& hosts);

}  // namespace kolo
