// kolo-server: one parameter server of a kolo job (comm/ps/ps_server.h).
// kolorun --num-servers K starts K of them; anything else that starts a job's
// workers with KOLO_NUM_SERVERS=K can start them by hand, each with the job's
// store and secret and:
//
//   KOLO_SERVER_RANK   which server it is (0 to K-1)
//   KOLO_NUM_SERVERS   K
//   KOLO_SIZE          the number of workers
//   KOLO_STORE_ADDR, KOLO_SECRET              the job's store
//   KOLO_HOST_ADDR or KOLO_IFACE              the address workers reach it at;
//                      without either it listens on loopback when
//                      KOLO_CROSS_SIZE (hosts of the job, default 1) is 1, else
//                      on its host name
//   KOLO_PEER_TIMEOUT, KOLO_START_TIMEOUT     as for the workers
//
// Exit status: 0 when the job's store went away (the job is over) or a session
// ended because a worker or another server failed (that one is the job's
// failure, named in the log); 1 when this server could not serve; 2 for bad
// settings.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "bootstrap/topology.h"
#include "comm/ps/ps_server.h"
#include "comm/ps/ps_settings.h"
#include "common/env.h"
#include "kolo/error.h"
#include "store/store.h"

namespace {

constexpr const char* kUsage =
    "usage: kolo-server\n"
    "One parameter server of a kolo job; kolorun --num-servers starts them. It takes\n"
    "everything from the environment: KOLO_SERVER_RANK, KOLO_NUM_SERVERS, KOLO_SIZE\n"
    "(workers), KOLO_STORE_ADDR and KOLO_SECRET, optionally KOLO_HOST_ADDR or\n"
    "KOLO_IFACE, KOLO_CROSS_SIZE, KOLO_PEER_TIMEOUT, KOLO_START_TIMEOUT.\n";

kolo::comm::ps::ServerSetup setup_from_env() {
  using namespace kolo;
  using comm::ps::kNumServers, comm::ps::kServerRank;
  if (!kServerRank.value()) throw InvalidArgumentError("KOLO_SERVER_RANK is not set");
  if (!kNumServers.value()) throw InvalidArgumentError("KOLO_NUM_SERVERS is not set");
  if (!kSize.value()) throw InvalidArgumentError("KOLO_SIZE (the number of workers) is not set");
  // Tighter than the ranks' bounds: a server serves at least one worker, as one
  // of at least one server.
  comm::ps::ServerSetup s;
  s.servers = static_cast<int>(env::get_int_in(kNumServers.name, 1, 1, kNumServers.max));
  s.server = static_cast<int>(env::get_int_in(kServerRank.name, 0, 0, s.servers - 1));
  s.workers = static_cast<int>(env::get_int_in(kSize.name, 1, 1, 1 << 20));
  s.secret = store::kSecret.text();
  s.options.peer_timeout = comm::kPeerTimeout.seconds(s.options.peer_timeout);
  s.options.connect_timeout = comm::kStartTimeout.seconds(s.options.connect_timeout);
  s.network = comm::MeshNetwork::from_env(env::get_int_in(kCrossSize.name, 1, 1, 1 << 20) == 1);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0;
    std::fputs(kUsage, help ? stdout : stderr);
    return help ? 0 : 2;
  }
  kolo::comm::ps::ServerSetup setup;
  std::unique_ptr<kolo::store::StoreClient> store;
  try {
    setup = setup_from_env();
    store = kolo::store::StoreClient::connect_from_env(setup.options.connect_timeout);
  } catch (const kolo::InvalidArgumentError& e) {
    std::fprintf(stderr, "kolo-server: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kolo-server: cannot reach the job's store: %s\n", e.what());
    return 1;
  }
  const auto end = kolo::comm::ps::serve_job(setup, *store);
  return end == kolo::comm::ps::ServerEnd::ServerFailed ? 1 : 0;
}
