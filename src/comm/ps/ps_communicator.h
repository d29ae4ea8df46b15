// Parameter-server mode on the workers: a communicator whose allreduce pushes
// to K server processes and takes their sum back (MXNet's dist_sync KVStore,
// BytePS's summation service), while every other collective, and the engine's
// own agreement step, stay on the workers' communicator among themselves.
//
// Each worker holds one authenticated connection per server (kolo's TCP mesh
// as a star: comm/tcp, MeshGroup::servers), driven by the calling thread like
// the tcp communicator. An allreduce is cut into partitions spread over the
// servers (ps_protocol.h); all of them are pushed at once and each result lands
// straight in the output. A server reduces the workers' pushes in worker-rank
// order with the kernels every communicator uses, so the result is the same bits
// on every worker, and the same bits as kolo's own allreduces (reduced in rank
// order), for every dtype and op.
//
// Failures: a server that closes its connection is named at once, one that
// makes no progress after the peer timeout ("server 1 made no progress ...");
// a worker that fails or stalls while a server waits for its push is named by
// that server, which then closes every connection, and every worker adopts its
// verdict (failure_verdict.h). abort() reaches both parts.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/mesh/mesh_communicator.h"
#include "comm/ps/ps_settings.h"
#include "store/store.h"

namespace kolo::comm::ps {

// The group of a job generation's servers and workers: servers are members 0
// to K-1, worker r is member K+r. Keys under "comm/<generation>/ps/", the
// failure verdict shared with the workers' communicator.
MeshGroup server_group(int generation, int servers, int workers, int member);

// Connects worker `workers->rank()` of generation `generation` to every server
// and returns the communicator of parameter-server mode, named "ps". `secret`
// is the job's; `store` must outlive it. Errors as make_tcp_communicator's,
// naming servers as "server <i>".
std::unique_ptr<Communicator> make_ps_communicator(std::unique_ptr<Communicator> workers, int generation,
                                                   const PsSettings& settings, store::StoreClient& store,
                                                   const MeshNetwork& network, const CommunicatorOptions& options,
                                                   const std::string& secret);

}  // namespace kolo::comm::ps
