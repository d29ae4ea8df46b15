// Forming the TCP communicator's full mesh: every rank listens, publishes its
// address in the job's store, connects to every lower rank and accepts every
// higher one, each connection opened by the authenticated handshake
// (tcp_handshake.h). Connections to lower ranks are made before accepting, so
// rank r only ever waits on ranks below it that are already accepting: no cycle.
//
// How a rank accepts, and keeps strangers from crowding its peers out, is in
// tcp_accept.h; a connecting rank whose handshake is cut there tries again until
// connect_timeout. The listening socket closes once the mesh is complete, so
// later strangers are refused by the kernel.
#pragma once

#include <chrono>
#include <vector>

#include "comm/mesh/mesh_communicator.h"
#include "comm/tcp/tcp_handshake.h"
#include "net/socket.h"
#include "store/store.h"

namespace kolo::comm::tcp {

struct MeshSetup {
  const MeshGroup* group = nullptr;
  HandshakeKeys keys;
  std::chrono::milliseconds connect_timeout{30000};
  // Longest a connection may take to complete its handshake once accepted.
  std::chrono::milliseconds handshake_timeout{5000};
  // TCP congestion control for every connection (KOLO_TCP_CONGESTION). Empty:
  // cubic for the connections within this host while its ranks have a core
  // each, else the host's default (choose_congestion_control in tcp_connect.cc).
  std::string congestion_control;
  // The host's cores, for that choice; 0: std::thread::hardware_concurrency().
  int cores = 0;
};

// KOLO_TCP_CONGESTION: empty when unset; InvalidArgumentError when this kernel
// does not take the name on a socket.
std::string congestion_from_env();

// One connected, authenticated, non-blocking socket per peer (index = group rank;
// this rank's own entry stays invalid). Errors: InvalidArgumentError (unusable
// address), TimeoutError (a rank did not show up, or its handshake was cut until
// connect_timeout), PeerFailureError (a rank could not be reached until then, or
// failed to prove the job's secret).
std::vector<net::Fd> connect_mesh(const MeshSetup& setup, store::StoreClient& store, const MeshNetwork& network);

// Whether this rank and the peers it reaches from an address of this host
// (connections of connect_mesh) outnumber the host's `cores` (0: its own count).
bool host_ranks_outnumber_cores(const std::vector<net::Fd>& fds, int cores);

}  // namespace kolo::comm::tcp
