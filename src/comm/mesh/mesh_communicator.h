// A full mesh of point-to-point TCP links between a group's ranks: what every
// network communicator shares (gloo's, comm/gloo, and kolo's own, comm/tcp):
// where a rank listens, which ranks form the group, and the interface a
// composition (hierarchical, parameter servers) uses to spread a failure.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "common/settings.h"

namespace kolo::comm {

// Where this rank's TCP endpoints listen (peers connect to that address).
struct MeshNetwork {
  // An address of this host the peers can reach (KOLO_HOST_ADDR); wins over iface.
  std::string host_addr;
  // A network interface whose address to use (KOLO_IFACE).
  std::string iface;
  // Every rank of the job runs on this host: loopback serves when neither is set.
  bool all_local = true;

  // KOLO_HOST_ADDR and KOLO_IFACE from the environment.
  static MeshNetwork from_env(bool all_local);
};

// kolorun chooses them for each host's ranks; the rendezvous file's store listens
// on KOLO_HOST_ADDR too.
extern const settings::Setting kHostAddr, kIface;

// The address a rank listens on for `network` (a numeric address or a host name
// the peers resolve), and where it came from, for errors.
struct ListenAddress {
  std::string host;
  std::string source;
};
// InvalidArgumentError for an interface without an address, or a job across
// hosts whose host name resolves to loopback only.
ListenAddress listen_address(const MeshNetwork& network);

// One set of ranks joined by a full mesh of TCP connections.
struct MeshGroup {
  int rank = 0;
  int size = 1;
  // Rendezvous keys of this group live under it; unique per job, init() generation
  // and group (e.g. "comm/0/gloo/world/").
  std::string key_prefix;
  // The job rank of each group rank, for errors and verdicts; empty when the
  // group is the whole job.
  std::vector<int> job_ranks;
  // Where the job-wide failure verdict lives (failure_verdict.h); shared by every
  // communicator of the job generation. Empty: key_prefix + "failure/".
  std::string verdict_prefix;
  // The group's first `servers` members are parameter servers (comm/ps), not
  // ranks of the job: they connect only to the other members (workers) and
  // those only to them, a star instead of a full mesh. Messages name them
  // "server <i>". Only kolo's own TCP mesh builds stars.
  int servers = 0;

  // The job rank of a member; -1 for a server.
  int job_rank(int group_rank) const;
  // "rank 3" or "server 1", as messages name the member.
  std::string member_name(int group_rank) const;
  // Whether members a and b have a connection of their own.
  bool linked(int a, int b) const { return a != b && (servers == 0 || (a < servers) != (b < servers)); }
};

// A TCP communicator (gloo's, or kolo's own: comm/tcp/tcp_communicator.h), plus
// what a composition needs to spread a failure that it learned elsewhere.
class MeshCommunicator : public Communicator {
 public:
  // Declares the communicator failed because job rank `job_rank` failed (as
  // `message` explains): records the verdict and closes every connection at once,
  // so that peers waiting on this rank wake and name that rank. Later calls throw
  // PeerFailureError. Never throws; call it from the thread that runs the collectives.
  virtual void fail_peer(int job_rank, const std::string& message) = 0;
};

}  // namespace kolo::comm
