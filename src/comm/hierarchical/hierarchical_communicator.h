// The hierarchical communicator for jobs that span hosts: a fast communicator
// among the ranks of each host (shared memory) composed with TCP between hosts,
// so that each byte crosses the network once per host instead of once per rank.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "comm/mesh/failure_verdict.h"
#include "comm/mesh/mesh_communicator.h"

namespace kolo::comm {

// Where the ranks are: `local_size` ranks on each of `cross_size` hosts, numbered
// host by host (rank = cross_rank * local_size + local_rank).
struct HostLayout {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  // The job rank of each rank, for failures and messages; empty when the
  // communicator's ranks are the job's (a process set's are some of them).
  std::vector<int> job_ranks;
};

// `local`: the ranks of this host (its rank is local_rank). `cross`: the ranks
// with this rank's local rank, one per host (its rank is cross_rank). `flat`: all
// ranks, for the operations that gain nothing from the hierarchy (reduce_scatter,
// gatherv, alltoallv). Every rank of the job calls this with its own three.
//
//  allreduce:  local reduce-scatter -> cross allreduce of this rank's shard
//              (every local rank drives its own TCP connections) -> local allgather
//  allgatherv: local allgatherv into the host's block -> host leaders (local rank
//              0) allgather the host blocks -> local broadcast from the leader
//  broadcast:  cross broadcast among the root's local-rank peers -> local broadcast
//  barrier:    local barrier -> leaders' cross barrier -> local barrier
//  allgather_self_sized (the engine's negotiation step): local self-sized
//              allgather -> leaders swap their hosts' blocks packed end to end
//              (self_sized_pack.h) -> each leader hands the job's pack to its
//              host in a local self-sized step; only the bytes used move
// Every element of an allreduce is reduced once per host (in local rank order)
// and once across hosts, by one rank each, so every rank gets the same bits.
//
// FAILURE. The host's part reports ranks in its own numbering (its messages name
// job ranks: CommunicatorOptions::job_ranks), the parts across hosts in the
// job's; the failure becomes the job-wide `verdict`. A failure seen in one part is
// then spread through the others at once (the local communicator is aborted with
// the verdict, the TCP ones closed through fail_peer), because a peer may be
// waiting on this rank in a part that saw nothing: without that it would wait out
// the peer timeout and then blame this rank.
std::unique_ptr<Communicator> make_hierarchical_communicator(const HostLayout& layout,
                                                             std::unique_ptr<Communicator> local,
                                                             std::unique_ptr<MeshCommunicator> cross,
                                                             std::unique_ptr<MeshCommunicator> flat,
                                                             FailureVerdict verdict);

}  // namespace kolo::comm
