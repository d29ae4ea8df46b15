// The accepting side of forming the TCP mesh (tcp_connect.h). While a rank waits
// for its higher peers it serves every incoming connection at once, each with its
// own deadline: a stranger, a wrong secret, a replayed or garbled handshake, or a
// second connection for a member already connected is refused and costs only its
// own socket.
//
// Anyone who reaches the port can connect, so strangers must not crowd the peers
// out: at most net::kMaxUnauthenticated connections authenticate at once, a new
// one closing the oldest; out of descriptors, the oldest is closed to make room
// (with none to close, the port rests for a moment instead of spinning). A peer
// closed that way connects again (connect_mesh).
#pragma once

#include <vector>

#include "comm/tcp/tcp_connect.h"
#include "net/socket.h"

namespace kolo::comm::tcp {

// Accepts on `listener` until every higher member linked to this one is in `fds`
// (by group rank). TimeoutError naming the missing members at `deadline`.
void accept_peers(const MeshSetup& setup, net::Fd listener, std::vector<net::Fd>& fds, net::Deadline deadline);

}  // namespace kolo::comm::tcp
