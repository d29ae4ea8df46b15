#include "bootstrap/bootstrap.h"

#include <unistd.h>

#include <algorithm>
#include <string>

#include "bootstrap/communicator_choice.h"
#include "bootstrap/elastic_join.h"
#include "bootstrap/world.h"
#include "common/logging.h"
#include "kolo/error.h"
#include "net/host_name.h"
#include "store/prefixed_store.h"

namespace kolo::bootstrap {
namespace {

// Every rank of the world announces itself in the store and waits for all the
// others. `job_ranks` (empty for the job itself) names the missing ones as the
// job knows them.
void rendezvous(store::StoreClient& client, int rank, int size, const std::vector<int>& job_ranks, int generation,
                std::chrono::milliseconds timeout) {
  const std::string prefix = "init/" + std::to_string(generation) + "/rank/";
  std::string me = net::host_name() + ":" + std::to_string(getpid());
  client.set(prefix + std::to_string(rank), store::Bytes(me.begin(), me.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  try {
    client.wait(keys, timeout);
  } catch (const TimeoutError&) {
    std::string missing;
    for (int r = 0; r < size; ++r) {
      const int job_rank = job_ranks.empty() ? r : job_ranks[static_cast<std::size_t>(r)];
      if (!client.check({keys[r]})) missing += (missing.empty() ? "" : ", ") + std::to_string(job_rank);
    }
    const std::string seconds = std::to_string(timeout.count() / 1000) + " s (KOLO_START_TIMEOUT)";
    if (job_ranks.empty()) throw TimeoutError("kolo::init: rank(s) " + missing + " did not start within " + seconds);
    throw TimeoutError("kolo::init: rank(s) " + missing + " of the job did not join the world of ranks " +
                       describe_ranks(job_ranks) + " within " + seconds +
                       "; every rank in the list must call init with the same list (after as many earlier inits)");
  }
}

std::unique_ptr<store::StoreClient> connect(const Topology& t, std::chrono::milliseconds timeout) {
  auto address = store::parse_store_address(t.store_addr);
  return store::StoreClient::connect(address.host, address.port, t.secret, timeout);
}

// Joins the world of the job ranks `ranks` (world.h): its own keys in the job's
// store, a rendezvous among its members, and each member's host for the local ranks.
Job join_world(const Topology& job, int generation, const std::vector<int>& ranks,
               std::chrono::milliseconds timeout) {
  const int size = static_cast<int>(ranks.size());
  const int rank = static_cast<int>(std::find(ranks.begin(), ranks.end(), job.rank) - ranks.begin());
  log::set_rank(size > 1 ? rank : -1);
  if (size == 1) {
    Topology t = world_topology(job, ranks, {job.cross_rank});
    t.store_addr.clear();  // a world of one talks to no one
    return Job::of(std::move(t), generation, nullptr);
  }
  if (job.store_addr.empty())
    throw InvalidArgumentError("kolo::init with the ranks " + describe_ranks(ranks) +
                               " needs the rendezvous store: start the job with kolorun (or kolorun --mpi), or set "
                               "KOLO_STORE_ADDR and KOLO_SECRET, or (for srun and mpirun jobs) KOLO_RENDEZVOUS_FILE");
  auto store = store::with_key_prefix(connect(job, timeout), world_name(ranks) + "/");
  const std::string host_key = "init/" + std::to_string(generation) + "/host/";
  const std::string mine = std::to_string(job.cross_rank);
  store->set(host_key + std::to_string(rank), store::Bytes(mine.begin(), mine.end()));
  rendezvous(*store, rank, size, ranks, generation, timeout);  // the host keys exist once it returns
  std::vector<int> hosts;
  for (int r = 0; r < size; ++r) {
    const store::Bytes value = store->get(host_key + std::to_string(r), timeout);
    hosts.push_back(std::stoi(std::string(value.begin(), value.end())));
  }
  return Job::of(world_topology(job, ranks, hosts), generation, std::move(store));
}

}  // namespace

Job::Job(Topology topology, int generation, std::unique_ptr<store::StoreClient> store)
    : topology_(std::move(topology)), generation_(generation), store_(std::move(store)) {}

Job Job::of(Topology topology, int generation, std::unique_ptr<store::StoreClient> store) {
  return Job(std::move(topology), generation, std::move(store));
}

Job Job::join(int& generations, const std::optional<std::vector<int>>& world_ranks, int blamed_rank) {
  if (const auto worker = elastic_worker()) {
    if (world_ranks)
      throw InvalidArgumentError("kolo::init with a list of ranks is not available in an elastic job: its ranks "
                                 "change as workers leave and join; use process sets");
    ++generations;
    ElasticJoin joined = join_elastic(*worker, blamed_rank);
    return Job(std::move(joined.topology), joined.generation, std::move(joined.store));
  }
  Topology t = topology_from_env();
  const auto start_timeout = comm::kStartTimeout.seconds();
  const bool world = world_ranks && !is_whole_job(*world_ranks, t.size);
  if (world) check_world_ranks(t, *world_ranks);
  const int generation = generations++;
  if (world) return join_world(t, generation, *world_ranks, start_timeout);
  log::set_rank(t.size > 1 ? t.rank : -1);
  std::unique_ptr<store::StoreClient> store;
  if (!t.store_addr.empty()) {
    store = connect(t, start_timeout);
    rendezvous(*store, t.rank, t.size, {}, generation, start_timeout);
  }
  return Job(std::move(t), generation, std::move(store));
}

std::unique_ptr<comm::Communicator> Job::communicator() const {
  return make_communicator(topology_, generation_, store_.get());
}

std::unique_ptr<comm::Communicator> Job::set_communicator(int set_id, const std::vector<int>& ranks,
                                                          const std::vector<int>& hosts) const {
  return make_set_communicator(topology_, generation_, store_.get(), set_id, ranks, hosts);
}

}  // namespace kolo::bootstrap
