// The environment each rank starts with: kolorun's own, plus the KOLO_* variables
// that tell the rank who it is and how to reach the job's store. The names are the
// ones the bootstrap reads (and tests/harness/multiprocess.cc sets).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plan/host_plan.h"

namespace kolorun {

struct JobIdentity {
  std::string job_id;      // 16 hex characters, names the job's shared memory
  std::string store_addr;  // host:port of the rendezvous store
  std::string secret;      // proves membership to the store; environment only
  std::string network_interface;  // --network-interface, passed on as KOLO_IFACE
  std::string cpu_binding = "none";  // KOLO_CPU_BIND: "core" or "none" (cpu_binding.h)
  std::string flight_dir;  // KOLO_FLIGHT_RECORDER_DIR for every rank
  // KOLO_HOST_ADDR for the ranks of each host that has an entry (host_address.h).
  std::map<std::string, std::string> host_addresses;
  // KOLO_LAUNCHER: "kolorun", or "mpirun" for the ranks mpirun starts for --mpi.
  std::string launcher = "kolorun";
  // Parameter servers (KOLO_NUM_SERVERS for every rank, when there are any), and
  // how many hosts the whole job spans (a server's KOLO_CROSS_SIZE).
  int num_servers = 0;
  int hosts = 1;
};

// A fresh random job id: 16 hex characters from the kernel's random source.
std::string make_job_id();

// "NAME=value" entries: `base` (normally environ, or what of it may travel to
// another host) without any variable kolorun sets, then kolorun's variables for
// `rank`.
std::vector<std::string> make_rank_environment(const std::vector<std::string>& base, const RankPlacement& rank,
                                               int size, const JobIdentity& job);

// The environment of worker `worker` of an elastic job on `host`: `base` as above
// without any rank's identity, then the job's store, id and secret, the host's
// address variables and KOLO_ELASTIC_WORKER. The worker learns its rank from
// the job's store (src/bootstrap/elastic_join.h). CPU binding is off: each
// host's share changes as workers come and go.
std::vector<std::string> make_worker_environment(const std::vector<std::string>& base, int worker,
                                                 const std::string& host, const JobIdentity& job,
                                                 std::chrono::milliseconds elastic_timeout);

// The environment of parameter server `server` on `host` of a job of `size`
// ranks: `base` as above, then KOLO_SERVER_RANK, KOLO_NUM_SERVERS, KOLO_SIZE (the
// ranks), the job's store, id and secret, and the host's address variables
// (what kolo-server reads).
std::vector<std::string> make_server_environment(const std::vector<std::string>& base, int server,
                                                 const std::string& host, int size, const JobIdentity& job);

// The entries of a NULL-terminated environment block.
std::vector<std::string> environment_entries(const char* const* env);

// "NAME" of a "NAME=value" entry.
std::string variable_name(const std::string& entry);
// The value of `name` in "NAME=value" entries, or nullopt when it is not there.
std::optional<std::string> lookup(const std::vector<std::string>& env, const std::string& name);

}  // namespace kolorun
