#include "bootstrap/communicator_choice.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/hierarchical/hierarchical_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/ps/ps_communicator.h"
#include "comm/shm/shm_communicator.h"
#include "comm/tcp/tcp_communicator.h"
#include "common/logging.h"
#include "common/settings.h"
#include "common/wake_slice.h"
#include "kolo/error.h"

namespace kolo {
namespace {

enum class Backend { Auto, Shm, Gloo, Tcp, Mpi };

// The transport between hosts: gloo's or kolo's own sockets.
enum class Network { Gloo, Tcp };

using settings::Kind;

KOLO_SETTING(kBackend, {.name = "KOLO_BACKEND", .kind = Kind::Choice, .fallback = "auto",
                        .choices = {"auto", "shm", "gloo", "tcp", "mpi"},
                        .doc = "the transport instead of the automatic choice"});
// Unset is neither: the choice follows the layout.
KOLO_SETTING(kHierarchical, {.name = "KOLO_HIERARCHICAL", .kind = Kind::Flag, .fallback = "auto",
                             .doc = "0: flat TCP across hosts; 1: hierarchical even on one host"});

Backend backend_from_env() {
  const std::string name = kBackend.choice();
  if (name == "shm") return Backend::Shm;
  if (name == "gloo") return Backend::Gloo;
  if (name == "tcp") return Backend::Tcp;
  if (name == "mpi") return Backend::Mpi;
  return Backend::Auto;
}

std::optional<bool> hierarchical_from_env() {
  if (!kHierarchical.value()) return std::nullopt;
  return kHierarchical.flag(false);
}

comm::CommunicatorOptions options_from_env() {
  comm::CommunicatorOptions options;
  options.peer_timeout = comm::kPeerTimeout.seconds(options.peer_timeout);
  options.connect_timeout = comm::kStartTimeout.seconds(options.connect_timeout);
  options.wake_slice = wake_slice_from_env();
  return options;
}

store::StoreClient& require_store(store::StoreClient* store, const char* what) {
  if (store == nullptr)
    throw InvalidArgumentError(std::string(what) +
                               " needs the rendezvous store: start the job with kolorun, or set KOLO_STORE_ADDR and "
                               "KOLO_SECRET, or (for srun and mpirun jobs) KOLO_RENDEZVOUS_FILE");
  return *store;
}

std::string generation_prefix(int generation) { return "comm/" + std::to_string(generation) + "/"; }
// One failure verdict for every communicator of the job generation.
std::string verdict_prefix(int generation) { return generation_prefix(generation) + "failure/"; }

std::unique_ptr<comm::MeshCommunicator> make_network(Network network, const comm::MeshGroup& group,
                                                     const Topology& t, store::StoreClient* store,
                                                     const comm::CommunicatorOptions& options) {
  auto& client = require_store(store, "kolo's TCP communicator");
  const auto addresses = comm::MeshNetwork::from_env(t.cross_size == 1);
  if (network == Network::Tcp) return comm::make_tcp_communicator(group, client, addresses, options, t.secret);
  return comm::make_gloo_communicator(group, client, addresses, options);
}

std::string network_prefix(Network network, int generation) {
  return generation_prefix(generation) + (network == Network::Tcp ? "tcp/" : "gloo/");
}

std::unique_ptr<comm::MeshCommunicator> make_flat(Network network, const Topology& t, int generation,
                                                  store::StoreClient* store, const comm::CommunicatorOptions& options) {
  comm::MeshGroup group;
  group.rank = t.rank;
  group.size = t.size;
  group.key_prefix = network_prefix(network, generation) + "world/";
  group.verdict_prefix = verdict_prefix(generation);
  return make_network(network, group, t, store, options);
}

// Every rank's view of the layout, gathered over `flat`, so that all ranks take
// the same decision: why hierarchical cannot serve the job, or empty when it can.
std::string layout_problem(const Topology& t, comm::Communicator& flat) {
  const int fields = 5;
  std::vector<std::int32_t> mine{t.rank, t.local_rank, t.local_size, t.cross_rank, t.cross_size};
  std::vector<std::int32_t> all(fields * t.size);
  std::vector<std::size_t> bytes(t.size, fields * sizeof(std::int32_t));
  flat.allgatherv(mine.data(), bytes[0], all.data(), bytes);
  const int local_size = all[2], cross_size = all[4];
  if (local_size * cross_size != t.size)
    return "the hosts run different numbers of ranks (" + std::to_string(t.size) + " ranks, " +
           std::to_string(cross_size) + " hosts)";
  for (int r = 0; r < t.size; ++r) {
    const std::int32_t* f = &all[fields * r];
    if (f[0] != r || f[2] != local_size || f[4] != cross_size || f[1] != r % local_size || f[3] != r / local_size)
      return "rank " + std::to_string(r) + " (local rank " + std::to_string(f[1]) + " on host " +
             std::to_string(f[3]) + ") breaks the host-by-host numbering with " + std::to_string(local_size) +
             " ranks per host";
  }
  return "";
}

// A hierarchical communicator over `members` (job ranks, host by host:
// members[h * local_size + l] is local rank l of the group's host h).
struct Hierarchy {
  std::string keys;     // the group's rendezvous keys, under the network's prefix
  std::string verdict;  // its failure verdict's prefix
  std::string segment;  // what names its hosts' shared memory (keyed by the secret), less the host
  std::vector<int> members;
  comm::HostLayout layout;
};

std::unique_ptr<comm::Communicator> make_hierarchy(Network network, const Topology& t, store::StoreClient* store,
                                                   const comm::CommunicatorOptions& options, Hierarchy h,
                                                   std::unique_ptr<comm::MeshCommunicator> flat) {
  const int L = h.layout.local_size, local_rank = h.layout.local_rank;
  std::unique_ptr<comm::Communicator> local;
  if (L == 1) {
    local = comm::make_self_communicator();
  } else {
    comm::CommunicatorOptions host_options = options;
    const auto first = h.members.begin() + static_cast<std::ptrdiff_t>(h.layout.cross_rank) * L;
    host_options.job_ranks.assign(first, first + L);
    // Hosts may be simulated on one machine, so the host index is part of the name.
    local = comm::make_shm_communicator(local_rank, L, h.segment + "-host" + std::to_string(t.cross_rank),
                                        host_options, t.secret);
  }
  // Same-local-rank peers, one per host.
  comm::MeshGroup cross_group;
  cross_group.rank = h.layout.cross_rank;
  cross_group.size = h.layout.cross_size;
  cross_group.key_prefix = h.keys + "cross" + std::to_string(local_rank) + "/";
  cross_group.verdict_prefix = h.verdict;
  for (int host = 0; host < h.layout.cross_size; ++host)
    cross_group.job_ranks.push_back(h.members[static_cast<std::size_t>(host * L + local_rank)]);
  auto cross = make_network(network, cross_group, t, store, options);
  h.layout.job_ranks = std::move(h.members);
  return comm::make_hierarchical_communicator(h.layout, std::move(local), std::move(cross), std::move(flat),
                                              comm::FailureVerdict(store, h.verdict, comm::rank_name(t.rank)));
}

std::unique_ptr<comm::Communicator> make_hierarchical(Network network, const Topology& t, int generation,
                                                      store::StoreClient* store,
                                                      const comm::CommunicatorOptions& options, bool forced) {
  auto flat = make_flat(network, t, generation, store, options);
  if (auto problem = layout_problem(t, *flat); !problem.empty()) {
    if (forced) throw InvalidArgumentError("KOLO_HIERARCHICAL=1, but " + problem);
    if (t.rank == 0) KOLO_LOG(Warning, "using the flat TCP communicator, not the hierarchical one: " << problem);
    return flat;
  }
  Hierarchy h{.keys = network_prefix(network, generation),
              .verdict = verdict_prefix(generation),
              .segment = t.job_id + "-" + std::to_string(generation),
              .members = std::vector<int>(static_cast<std::size_t>(t.size)),
              .layout = {t.local_rank, t.local_size, t.cross_rank, t.cross_size, {}}};
  std::iota(h.members.begin(), h.members.end(), 0);
  return make_hierarchy(network, t, store, options, std::move(h), std::move(flat));
}

// A process set's place in a hierarchy: its members (ascending) come host by
// host, as many on each of several hosts, more than one on each (with one per
// host the composition is the flat communicator's call). Empty otherwise.
std::optional<comm::HostLayout> set_layout(const std::vector<int>& hosts, int index) {
  const auto n = static_cast<int>(hosts.size());
  const auto L = static_cast<int>(std::find_if(hosts.begin(), hosts.end(), [&](int h) { return h != hosts[0]; }) -
                                  hosts.begin());
  if (L < 2 || L == n || n % L != 0) return std::nullopt;
  std::set<int> seen;
  for (int i = 0; i < n; i += L) {
    if (!seen.insert(hosts[static_cast<std::size_t>(i)]).second) return std::nullopt;
    for (int j = i; j < i + L; ++j)
      if (hosts[static_cast<std::size_t>(j)] != hosts[static_cast<std::size_t>(i)]) return std::nullopt;
  }
  return comm::HostLayout{index % L, L, index / L, n / L, {}};
}

std::unique_ptr<comm::Communicator> make_mpi(const Topology& t, const comm::CommunicatorOptions& options) {
  if (!t.whole_job())
    throw InvalidArgumentError("KOLO_BACKEND=mpi serves the whole job (MPI_COMM_WORLD), not a world of some of its "
                               "ranks (init with a list of ranks); leave KOLO_BACKEND unset or choose shm, tcp or gloo");
  auto comm = comm::make_mpi_communicator(options);
  if (comm->size() != t.size || comm->rank() != t.rank)
    throw InvalidArgumentError("the MPI communicator needs the job's ranks to be MPI's, but MPI sees rank " +
                               std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                               " where the launcher said rank " +
                               std::to_string(t.rank) + " of " + std::to_string(t.size) +
                               "; start the job with mpirun or kolorun --mpi to use MPI");
  return comm;
}

std::unique_ptr<comm::Communicator> choose(const Topology& t, int generation, store::StoreClient* store,
                                           const comm::CommunicatorOptions& options) {
  const Backend backend = backend_from_env();
  const auto hierarchical = hierarchical_from_env();
  const bool forced = hierarchical.value_or(false);
  switch (backend) {
    case Backend::Mpi: return make_mpi(t, options);
    case Backend::Shm:
      if (t.cross_size > 1)
        throw InvalidArgumentError("KOLO_BACKEND=shm, but the job spans " + std::to_string(t.cross_size) +
                                   " hosts; use KOLO_BACKEND=auto or gloo");
      return comm::make_shm_communicator(t.rank, t.size, t.job_id + "-" + std::to_string(generation), options,
                                         t.secret);
    case Backend::Gloo:
    case Backend::Tcp: {
      const Network network = backend == Backend::Tcp ? Network::Tcp : Network::Gloo;
      if (forced) return make_hierarchical(network, t, generation, store, options, true);
      return make_flat(network, t, generation, store, options);
    }
    case Backend::Auto: break;
  }
  if (started_by_mpirun(t.launcher) && t.whole_job() && comm::mpi_available()) return make_mpi(t, options);
  // Between hosts kolo's own sockets: gloo's transport hands every message
  // through its I/O thread and waits for the receiver's ready notice, which makes
  // allreduces up to 64 KiB tens of times slower (docs/benchmarks.md, "Across hosts").
  if (hierarchical.value_or(t.cross_size > 1))
    return make_hierarchical(Network::Tcp, t, generation, store, options, forced);
  if (t.cross_size > 1) return make_flat(Network::Tcp, t, generation, store, options);
  return comm::make_shm_communicator(t.rank, t.size, t.job_id + "-" + std::to_string(generation), options,
                                     t.secret);
}

}  // namespace

std::unique_ptr<comm::Communicator> make_set_communicator(const Topology& t, int generation, store::StoreClient* store,
                                                          int set_id, const std::vector<int>& ranks,
                                                          const std::vector<int>& hosts) {
  const int index = static_cast<int>(std::find(ranks.begin(), ranks.end(), t.rank) - ranks.begin());
  const int size = static_cast<int>(ranks.size());
  if (size == 1) return comm::make_self_communicator();
  const std::string set_name = "set" + std::to_string(set_id);
  const Backend backend = backend_from_env();
  const auto options = options_from_env();
  const bool one_host = std::all_of(hosts.begin(), hosts.end(), [&](int host) { return host == hosts.front(); });
  if (one_host && (backend == Backend::Auto || backend == Backend::Shm)) {
    comm::CommunicatorOptions set_options = options;
    set_options.job_ranks = ranks;
    return comm::make_shm_communicator(index, size, t.job_id + "-" + std::to_string(generation) + "-" + set_name,
                                       set_options, t.secret);
  }
  // Otherwise TCP as the world's network would be: kolo's own sockets unless
  // KOLO_BACKEND=gloo, composed with shared memory inside each host where the
  // world would be.
  const Network network = backend == Backend::Gloo ? Network::Gloo : Network::Tcp;
  comm::MeshGroup group;
  group.rank = index;
  group.size = size;
  group.key_prefix = generation_prefix(generation) + set_name + "/" + (network == Network::Tcp ? "tcp/" : "gloo/");
  group.verdict_prefix = verdict_prefix(generation) + set_name + "/";
  group.job_ranks = ranks;
  auto flat = make_network(network, group, t, store, options);
  const auto hierarchical = hierarchical_from_env();
  const bool composed = backend == Backend::Auto ? hierarchical.value_or(true)
                        : backend == Backend::Tcp || backend == Backend::Gloo ? hierarchical.value_or(false)
                                                                              : false;
  const auto layout = composed ? set_layout(hosts, index) : std::nullopt;
  if (!layout) return flat;
  Hierarchy h{.keys = group.key_prefix,
              .verdict = group.verdict_prefix,
              .segment = t.job_id + "-" + std::to_string(generation) + "-" + set_name,
              .members = ranks,
              .layout = *layout};
  return make_hierarchy(network, t, store, options, std::move(h), std::move(flat));
}

bool shares_buffers(const Topology& t) {
  if (t.size == 1 || comm::ps::PsSettings::from_env().servers > 0) return false;
  switch (backend_from_env()) {
    case Backend::Shm: return true;
    case Backend::Auto:
      return !(started_by_mpirun(t.launcher) && t.whole_job() && comm::mpi_available()) &&
             !hierarchical_from_env().value_or(t.cross_size > 1) && t.cross_size == 1;
    default: return false;
  }
}

std::unique_ptr<comm::Communicator> make_communicator(const Topology& t, int generation, store::StoreClient* store) {
  // Checked in a job of one too, which chooses no transport: the same settings
  // must not pass at one rank and fail at two.
  const auto options = options_from_env();
  const auto ps = comm::ps::PsSettings::from_env();
  backend_from_env();
  hierarchical_from_env();
  auto comm = t.size == 1 ? comm::make_self_communicator() : choose(t, generation, store, options);
  if (ps.servers > 0) {
    if (!t.whole_job())
      throw InvalidArgumentError("parameter-server mode (KOLO_NUM_SERVERS) serves the whole job, not a world of some "
                                 "of its ranks (init with a list of ranks)");
    const std::string workers = comm->name();
    comm = comm::ps::make_ps_communicator(std::move(comm), generation, ps,
                                          require_store(store, "parameter-server mode (KOLO_NUM_SERVERS)"),
                                          comm::MeshNetwork::from_env(t.cross_size == 1), options, t.secret);
    if (t.rank == 0)
      KOLO_LOG(Info, "communicator: allreduce through " << ps.servers << " parameter server(s), the rest over "
                                                        << workers << " (" << t.size << " workers on "
                                                        << t.cross_size << " host(s))");
  } else if (t.size > 1 && t.rank == 0) {
    KOLO_LOG(Info, "communicator: " << comm->name() << " (" << t.size << " ranks on " << t.cross_size
                                    << " host(s), started by " << to_string(t.launcher) << ")");
  }
  return comm;
}

}  // namespace kolo
