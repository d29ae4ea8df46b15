// A parameter server: the loop tools/kolo-server runs, one process per server.
//
// A job's workers may start several sessions (init() after shutdown()), each a
// generation with rendezvous keys of its own; a server serves them one after
// the other. For each it waits, without a time limit, until every worker has
// announced itself in the store, then accepts one authenticated connection from
// each worker (kolo's TCP mesh as a star), and serves pushes in the order every
// worker makes them (ps_protocol.h): it receives the same partition from all
// workers, reduces them in worker-rank order and sends the result to each. The
// answer to one partition goes out while the next one comes in.
//
// Waiting for the next push has no time limit (a worker may compute for long);
// once one worker's push arrives, every other one's must follow within half the
// peer timeout, or that worker is named failed. Half, so that the server, which
// knows who is late, speaks before the workers waiting on it give up on the
// server itself at the full timeout. A session ends when every worker said Bye.
#pragma once

#include <chrono>
#include <string>

#include "comm/communicator.h"
#include "comm/mesh/mesh_communicator.h"
#include "store/store.h"

namespace kolo::comm::ps {

struct ServerSetup {
  int server = 0;   // which one, 0 to servers-1
  int servers = 1;
  int workers = 1;
  std::string secret;
  MeshNetwork network;
  // peer_timeout: the workers'; connect_timeout: how long a session's workers
  // may take to connect once all of them have announced themselves.
  CommunicatorOptions options;
};

// How a server's work ended.
enum class ServerEnd {
  StoreGone,     // the job's store went away: the job is over
  PeerFailed,    // a session failed for a worker's (or another server's) fault, named in the log
  ServerFailed,  // this server could not serve (it could not listen, workers never connected, ...)
};

// Serves session after session until one fails or the store goes away; never
// throws. Logs why it stopped.
ServerEnd serve_job(const ServerSetup& setup, store::StoreClient& store);

// One session (generation `generation`): returns when every worker has said Bye.
// Throws PeerFailureError naming the worker or server at fault (after closing
// every connection, so that the workers learn it), and what connecting throws.
void serve_session(const ServerSetup& setup, store::StoreClient& store, int generation);

}  // namespace kolo::comm::ps
