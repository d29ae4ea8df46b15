#include "bootstrap/communicator_choice.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>
#include <string_view>
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

using settings::Kind;

KOLO_SETTING(kBackend, {.name = "KOLO_BACKEND", .kind = Kind::Choice, .fallback = "auto",
                        .choices = {"auto", "shm", "gloo", "tcp", "mpi"},
                        .doc = "the transport instead of the automatic choice"});
// Unset is neither: the choice follows the layout.
KOLO_SETTING(kHierarchical, {.name = "KOLO_HIERARCHICAL", .kind = Kind::Flag, .fallback = "auto",
                             .doc = "0: flat TCP across hosts; 1: hierarchical even on one host"});

// What the user asked for: KOLO_BACKEND and KOLO_HIERARCHICAL.
struct Asked {
  std::string backend;               // "auto" or a transport's name
  std::optional<bool> hierarchical;  // unset: the layout decides
  bool automatic() const { return backend == "auto"; }
  // The network between hosts: gloo's transport when asked for, else kolo's own sockets.
  std::string_view network() const { return backend == "gloo" ? "gloo" : "tcp"; }
};

Asked asked_from_env() {
  Asked asked;
  asked.backend = kBackend.choice();
  if (kHierarchical.value()) asked.hierarchical = kHierarchical.flag(false);
  return asked;
}

comm::CommunicatorOptions options_from_env() {
  comm::CommunicatorOptions options;
  options.peer_timeout = comm::kPeerTimeout.seconds(options.peer_timeout);
  options.connect_timeout = comm::kStartTimeout.seconds(options.connect_timeout);
  options.wake_slice = wake_slice_from_env();
  return options;
}

// What a communicator joins: the world, or a process set of it.
struct Scope {
  // The world, on the topology's hosts.
  Scope(const Topology& topology, int generation_, store::StoreClient* store_)
      : t(topology), generation(generation_), store(store_), options(options_from_env()), index(topology.rank),
        one_host(topology.cross_size == 1) {}

  const Topology& t;
  int generation;
  store::StoreClient* store;
  comm::CommunicatorOptions options;
  bool world = true;
  std::vector<int> ranks;  // a set's members (job ranks, ascending); empty for the world
  std::vector<int> hosts;  // each member's host (a set's only: the world's are known after a gather)
  int index;              // this rank among the members
  std::string set_name;    // "set<id>", empty for the world
  bool one_host;

  int size() const { return world ? t.size : static_cast<int>(ranks.size()); }
  // What names its shared memory (keyed by the secret) and its rendezvous keys.
  std::string segment() const {
    return t.job_id + "-" + std::to_string(generation) + (world ? "" : "-" + set_name);
  }
  std::string keys(std::string_view network) const {
    return "comm/" + std::to_string(generation) + "/" + (world ? "" : set_name + "/") + std::string(network) + "/";
  }
  // One failure verdict for every communicator of the job generation; a set's under it.
  std::string verdict() const {
    return "comm/" + std::to_string(generation) + "/failure/" + (world ? "" : set_name + "/");
  }
};

store::StoreClient& require_store(store::StoreClient* store, const char* what) {
  if (store == nullptr)
    throw InvalidArgumentError(std::string(what) +
                               " needs the rendezvous store: start the job with kolorun, or set KOLO_STORE_ADDR and "
                               "KOLO_SECRET, or (for srun and mpirun jobs) KOLO_RENDEZVOUS_FILE");
  return *store;
}

std::unique_ptr<comm::MeshCommunicator> make_network(std::string_view network, const comm::MeshGroup& group,
                                                     const Scope& s) {
  auto& client = require_store(s.store, "kolo's TCP communicator");
  const auto addresses = comm::MeshNetwork::from_env(s.t.cross_size == 1);
  if (network == "tcp") return comm::make_tcp_communicator(group, client, addresses, s.options, s.t.secret);
  return comm::make_gloo_communicator(group, client, addresses, s.options);
}

// Every member joined to every other by the network.
std::unique_ptr<comm::MeshCommunicator> make_flat(std::string_view network, const Scope& s) {
  comm::MeshGroup group;
  group.rank = s.index;
  group.size = s.size();
  group.key_prefix = s.keys(network) + (s.world ? "world/" : "");
  group.verdict_prefix = s.verdict();
  group.job_ranks = s.ranks;
  return make_network(network, group, s);
}

// Every rank's view of the world's layout, gathered over `flat`, so that all
// ranks take the same decision: why hierarchical cannot serve the world, or empty
// when it can.
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

// Shared memory inside each host, the network between same-local-rank members
// of the hosts, composed over `layout`; `flat` joins every member.
std::unique_ptr<comm::Communicator> make_hierarchy(std::string_view network, const Scope& s, comm::HostLayout layout,
                                                   std::unique_ptr<comm::MeshCommunicator> flat) {
  const int L = layout.local_size, local_rank = layout.local_rank;
  std::vector<int> members = s.ranks;
  if (s.world) {
    members.resize(static_cast<std::size_t>(s.t.size));
    std::iota(members.begin(), members.end(), 0);
  }
  std::unique_ptr<comm::Communicator> local;
  if (L == 1) {
    local = comm::make_self_communicator();
  } else {
    comm::CommunicatorOptions host_options = s.options;
    const auto first = members.begin() + static_cast<std::ptrdiff_t>(layout.cross_rank) * L;
    host_options.job_ranks.assign(first, first + L);
    // Hosts may be simulated on one machine, so the host index is part of the name.
    local = comm::make_shm_communicator(local_rank, L, s.segment() + "-host" + std::to_string(s.t.cross_rank),
                                        host_options, s.t.secret);
  }
  comm::MeshGroup cross_group;
  cross_group.rank = layout.cross_rank;
  cross_group.size = layout.cross_size;
  cross_group.key_prefix = s.keys(network) + "cross" + std::to_string(local_rank) + "/";
  cross_group.verdict_prefix = s.verdict();
  for (int host = 0; host < layout.cross_size; ++host)
    cross_group.job_ranks.push_back(members[static_cast<std::size_t>(host * L + local_rank)]);
  auto cross = make_network(network, cross_group, s);
  layout.job_ranks = std::move(members);
  return comm::make_hierarchical_communicator(layout, std::move(local), std::move(cross), std::move(flat),
                                              comm::FailureVerdict(s.store, s.verdict(), comm::rank_name(s.t.rank)));
}

std::unique_ptr<comm::Communicator> make_mpi(const Scope& s) {
  auto comm = comm::make_mpi_communicator(s.options);
  if (comm->size() != s.t.size || comm->rank() != s.t.rank)
    throw InvalidArgumentError("the MPI communicator needs the job's ranks to be MPI's, but MPI sees rank " +
                               std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) +
                               " where the launcher said rank " + std::to_string(s.t.rank) + " of " +
                               std::to_string(s.t.size) + "; start the job with mpirun or kolorun --mpi to use MPI");
  return comm;
}

std::unique_ptr<comm::Communicator> make_shm(const Scope& s) {
  comm::CommunicatorOptions options = s.options;
  options.job_ranks = s.ranks;
  return comm::make_shm_communicator(s.index, s.size(), s.segment(), options, s.t.secret);
}

// The world's hierarchy is known to fit only once every rank's place is
// gathered; when it does not, it settles for the flat communicator (an error
// when KOLO_HIERARCHICAL=1 forced it). A set's members' hosts are known before.
std::unique_ptr<comm::Communicator> make_hierarchical(const Scope& s, const Asked& asked) {
  auto flat = make_flat(asked.network(), s);
  if (!s.world) return make_hierarchy(asked.network(), s, *set_layout(s.hosts, s.index), std::move(flat));
  if (auto problem = layout_problem(s.t, *flat); !problem.empty()) {
    if (asked.hierarchical.value_or(false)) throw InvalidArgumentError("KOLO_HIERARCHICAL=1, but " + problem);
    if (s.t.rank == 0) KOLO_LOG(Warning, "using the flat TCP communicator, not the hierarchical one: " << problem);
    return flat;
  }
  const comm::HostLayout layout{s.t.local_rank, s.t.local_size, s.t.cross_rank, s.t.cross_size, {}};
  return make_hierarchy(asked.network(), s, layout, std::move(flat));
}

// Whether a transport takes a scope under what was asked: Yes, No (the walk goes
// on to the next one), or Refused (the user asked for it by name and it cannot
// serve: an error that says why).
struct Fit {
  enum { No, Yes, Refused } answer = No;
  std::string why;
};
const Fit kYes{Fit::Yes, {}};
const Fit kNo{Fit::No, {}};

// One transport: its name (KOLO_BACKEND's value), whether it works in shared
// buffers (every member maps the others' memory), whether this build has it,
// whether it takes a scope, how to make it.
struct Transport {
  std::string_view name;
  bool shares_buffers;
  bool (*available)();
  Fit (*fits)(const Scope&, const Asked&);
  std::unique_ptr<comm::Communicator> (*make)(const Scope&, const Asked&);
};

bool always() { return true; }

// In priority order: the first that fits is the one. The world and a set differ
// in three places, each said where it is decided: mpi serves only the whole job;
// a set that KOLO_BACKEND=shm cannot serve goes over the network instead of
// failing (the world's check has already told the user); and on one host a set
// is never composed (KOLO_HIERARCHICAL=1 composes a world there, to try the
// hierarchy on one machine).
const Transport kTransports[] = {
    {"mpi", false, comm::mpi_available,
     [](const Scope& s, const Asked& asked) -> Fit {
       if (!s.world) return kNo;  // MPI_COMM_WORLD only: a set goes over the network
       if (asked.backend == "mpi" && !s.t.whole_job())
         return {Fit::Refused,
                 "KOLO_BACKEND=mpi serves the whole job (MPI_COMM_WORLD), not a world of some of its ranks (init "
                 "with a list of ranks); leave KOLO_BACKEND unset or choose shm, tcp or gloo"};
       if (asked.backend == "mpi") return kYes;
       return asked.automatic() && started_by_mpirun(s.t.launcher) && s.t.whole_job() ? kYes : kNo;
     },
     [](const Scope& s, const Asked&) { return make_mpi(s); }},
    {"shm", true, always,
     [](const Scope& s, const Asked& asked) -> Fit {
       if (asked.backend == "shm" && !s.one_host && s.world)
         return {Fit::Refused, "KOLO_BACKEND=shm, but the job spans " + std::to_string(s.t.cross_size) +
                                   " hosts; use KOLO_BACKEND=auto or gloo"};
       if (!s.one_host || !(asked.automatic() || asked.backend == "shm")) return kNo;
       return s.world && asked.automatic() && asked.hierarchical.value_or(false) ? kNo : kYes;
     },
     [](const Scope& s, const Asked&) { return make_shm(s); }},
    {"hierarchical", false, always,
     [](const Scope& s, const Asked& asked) -> Fit {
       if (asked.backend != "auto" && asked.backend != "tcp" && asked.backend != "gloo") return kNo;
       // Across hosts by default, where the automatic choice decides; asked for
       // by KOLO_HIERARCHICAL=1 over tcp or gloo.
       const bool wanted = asked.hierarchical.value_or(asked.automatic() && (!s.world || !s.one_host));
       if (!wanted) return kNo;
       return s.world || set_layout(s.hosts, s.index) ? kYes : kNo;
     },
     make_hierarchical},
    {"tcp", false, always,
     [](const Scope&, const Asked& asked) { return asked.backend == "gloo" ? kNo : kYes; },
     [](const Scope& s, const Asked&) -> std::unique_ptr<comm::Communicator> { return make_flat("tcp", s); }},
    {"gloo", false, comm::gloo_available,
     [](const Scope&, const Asked& asked) { return asked.backend == "gloo" ? kYes : kNo; },
     [](const Scope& s, const Asked&) -> std::unique_ptr<comm::Communicator> { return make_flat("gloo", s); }},
};

// The first transport that fits `scope`. One this build lacks is passed over
// unless the user named it (its make() then says what to rebuild with).
const Transport& transport_for(const Scope& scope, const Asked& asked) {
  for (const Transport& transport : kTransports) {
    if (!transport.available() && asked.backend != transport.name) continue;
    const Fit fit = transport.fits(scope, asked);
    if (fit.answer == Fit::Refused) throw InvalidArgumentError(fit.why);
    if (fit.answer == Fit::Yes) return transport;
  }
  throw InvalidArgumentError("no transport serves KOLO_BACKEND=" + asked.backend);  // tcp takes what is left
}

}  // namespace

std::unique_ptr<comm::Communicator> make_set_communicator(const Topology& t, int generation, store::StoreClient* store,
                                                          int set_id, const std::vector<int>& ranks,
                                                          const std::vector<int>& hosts) {
  if (ranks.size() == 1) return comm::make_self_communicator();
  Scope scope(t, generation, store);
  scope.world = false;
  scope.ranks = ranks;
  scope.hosts = hosts;
  scope.index = static_cast<int>(std::find(ranks.begin(), ranks.end(), t.rank) - ranks.begin());
  scope.set_name = "set" + std::to_string(set_id);
  scope.one_host = std::all_of(hosts.begin(), hosts.end(), [&](int host) { return host == hosts.front(); });
  const Asked asked = asked_from_env();
  return transport_for(scope, asked).make(scope, asked);
}

bool shares_buffers(const Topology& t) {
  if (t.size == 1 || comm::ps::PsSettings::from_env().servers > 0) return false;
  try {
    return transport_for(Scope(t, 0, nullptr), asked_from_env()).shares_buffers;
  } catch (const InvalidArgumentError&) {
    return false;  // making the communicator will say why
  }
}

std::unique_ptr<comm::Communicator> make_communicator(const Topology& t, int generation, store::StoreClient* store) {
  // Checked in a job of one too, which chooses no transport: the same settings
  // must not pass at one rank and fail at two.
  const Scope scope(t, generation, store);
  const auto ps = comm::ps::PsSettings::from_env();
  const Asked asked = asked_from_env();
  std::unique_ptr<comm::Communicator> comm;
  if (t.size == 1) {
    comm = comm::make_self_communicator();
  } else {
    comm = transport_for(scope, asked).make(scope, asked);
  }
  if (ps.servers > 0) {
    if (!t.whole_job())
      throw InvalidArgumentError("parameter-server mode (KOLO_NUM_SERVERS) serves the whole job, not a world of some "
                                 "of its ranks (init with a list of ranks)");
    const std::string workers = comm->name();
    comm = comm::ps::make_ps_communicator(std::move(comm), generation, ps,
                                          require_store(store, "parameter-server mode (KOLO_NUM_SERVERS)"),
                                          comm::MeshNetwork::from_env(t.cross_size == 1), scope.options, t.secret);
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
