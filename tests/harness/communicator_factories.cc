#include "harness/communicator_factories.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "bootstrap/communicator_choice.h"
#include "bootstrap/topology.h"
#include "comm/gloo/gloo_communicator.h"
#include "comm/mpi/mpi_communicator.h"
#include "comm/shm/shm_communicator.h"
#include "comm/tcp/tcp_communicator.h"
#include "harness/fake_hosts.h"
#include "harness/job_store.h"
#include "harness/mpirun.h"

namespace kolo::testing {
namespace {

using comm::CommunicatorOptions;

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

HostShape flat(int ranks) { return {.per_host = ranks, .hosts = 1}; }

bool always() { return true; }

comm::MeshGroup whole_job(const char* prefix) {
  comm::MeshGroup group;
  group.rank = env_int("KOLO_RANK");
  group.size = env_int("KOLO_SIZE");
  group.key_prefix = prefix;
  return group;
}

Member join_tcp(HostShape, const CommunicatorOptions& options) {
  Member m;
  m.store = connect_job_store();
  m.comm = comm::make_tcp_communicator(whole_job("suite/tcp/"), *m.store, {}, options, std::getenv("KOLO_SECRET"));
  return m;
}

Member join_gloo(HostShape, const CommunicatorOptions& options) {
  Member m;
  m.store = connect_job_store();
  m.comm = comm::make_gloo_communicator(whole_job("suite/gloo/"), *m.store, {}, options);
  return m;
}

std::string seconds_text(std::chrono::milliseconds t) { return std::to_string(t.count() / 1000.0); }

// Through the communicator choice, as init() builds it, on fake hosts; the
// choice takes its timeouts from the environment.
Member join_hierarchical(HostShape shape, const CommunicatorOptions& options, const char* backend) {
  const int rank = env_int("KOLO_RANK");
  place_on_fake_host(rank, shape.per_host, shape.hosts);
  ::setenv("KOLO_HIERARCHICAL", "1", 1);  // also for one host, or one rank per host
  ::setenv("KOLO_BACKEND", backend, 1);
  ::setenv("KOLO_HOST_ADDR", "127.0.0.1", 1);  // fake hosts share loopback
  ::setenv("KOLO_PEER_TIMEOUT", seconds_text(options.peer_timeout).c_str(), 1);
  ::setenv("KOLO_START_TIMEOUT", seconds_text(options.connect_timeout).c_str(), 1);
  Member m;
  const Topology topology = topology_from_env();
  m.store = connect_job_store();
  m.comm = make_communicator(topology, 0, m.store.get());
  return m;
}

// Parameter-server mode as init() builds it (KOLO_NUM_SERVERS comes from the
// harness, which starts the servers): allreduce through the servers, the rest
// over shared memory among the ranks.
Member join_ps(HostShape, const CommunicatorOptions& options) {
  ::setenv("KOLO_PEER_TIMEOUT", seconds_text(options.peer_timeout).c_str(), 1);
  ::setenv("KOLO_START_TIMEOUT", seconds_text(options.connect_timeout).c_str(), 1);
  Member m;
  const Topology topology = topology_from_env();
  m.store = connect_job_store();
  // Announced as bootstrap::Job::join does: the servers start a session when
  // every worker has.
  m.store->set("init/0/rank/" + std::to_string(topology.rank), {1});
  m.comm = make_communicator(topology, 0, m.store.get());
  return m;
}

Member join_shm(HostShape, const CommunicatorOptions& options) {
  return Member{nullptr, comm::make_shm_communicator(env_int("KOLO_RANK"), env_int("KOLO_SIZE"),
                                                     std::getenv("KOLO_JOB_ID"), options)};
}

const std::map<std::string, std::string> kNetworkThresholds = {
    {"KOLO_TCP_SMALL_BYTES", "1024"}, {"KOLO_TCP_ROUND_BYTES", "4096"},
    {"KOLO_GLOO_SMALL_BYTES", "1024"}, {"KOLO_GLOO_ROUND_BYTES", "4096"}};

std::map<std::string, std::string> hierarchical_thresholds() {
  auto env = kNetworkThresholds;
  env.emplace("KOLO_SHM_SMALL_BYTES", "1024");
  env.emplace("KOLO_SHM_SLOT_BYTES", "16384");
  return env;
}

std::vector<CommunicatorFactory> make_factories() {
  const HostShape two_hosts_of_two{.per_host = 2, .hosts = 2};
  const HostShape three_hosts_of_two{.per_host = 2, .hosts = 3};
  return {
      {.name = "self",
       .reports = "self",
       .available = always,
       .join = [](HostShape, const CommunicatorOptions&) { return Member{nullptr, comm::make_self_communicator()}; },
       .shapes = {flat(1)},
       .failure_shape = flat(1),
       .refuses_bad_arguments = false},
      {.name = "shm",
       .reports = "shm",
       .available = always,
       .join = join_shm,
       // Small slots, so that modest sizes cross many chunks and exceed the whole
       // shared area (ranks x 2 slots), and a small one-step threshold.
       .small_thresholds = {{"KOLO_SHM_SLOT_BYTES", "65536"}, {"KOLO_SHM_SMALL_BYTES", "4096"}},
       .shapes = {flat(2), flat(3), flat(4)},
       .failure_shape = flat(4),
       .killed_peer_words = "died",
       .stalled_peer_words = "no progress",
       .abort_seen_by_peers = "aborted: "},
      // Every broadcast of more than two slots read by its receivers straight out
      // of the root's buffer (comm/shm/shm_single_copy.h), which by default
      // happens only while the ranks wait for CPUs.
      {.name = "shm_single_copy",
       .reports = "shm",
       .available = always,
       .join = join_shm,
       .small_thresholds = {{"KOLO_SHM_SLOT_BYTES", "65536"},
                            {"KOLO_SHM_SMALL_BYTES", "4096"},
                            {"KOLO_SHM_SINGLE_COPY", "always"}},
       .shapes = {flat(2), flat(3)},
       .failure_shape = flat(3),
       .killed_peer_words = "died",
       .stalled_peer_words = "no progress",
       .abort_seen_by_peers = "aborted: "},
      {.name = "tcp",
       .reports = "tcp",
       .available = always,
       .join = join_tcp,
       .small_thresholds = kNetworkThresholds,
       .shapes = {flat(1), flat(2), flat(3), flat(4)},
       .failure_shape = flat(4)},
      {.name = "gloo",
       .reports = "gloo",
       .available = comm::gloo_available,
       .join = join_gloo,
       .small_thresholds = kNetworkThresholds,
       .shapes = {flat(1), flat(2), flat(3), flat(4)},
       .large_bytes = 0,
       .failure_shape = flat(4)},
      {.name = "hierarchical",
       .reports = "hierarchical",
       .available = always,
       .join = [](HostShape shape, const CommunicatorOptions& o) { return join_hierarchical(shape, o, "tcp"); },
       .small_thresholds = hierarchical_thresholds(),
       .shapes = {two_hosts_of_two, three_hosts_of_two, {.per_host = 1, .hosts = 2}, {.per_host = 3, .hosts = 1}},
       .failure_shape = two_hosts_of_two,
       .reduce_scatter_order = CommunicatorFactory::Order::RankOrder,  // through the flat communicator
       .names_stalled_rank = false},
      // KOLO_BACKEND=gloo with KOLO_HIERARCHICAL=1: gloo's transport joins the hosts.
      {.name = "hierarchical_over_gloo",
       .reports = "hierarchical",
       .available = comm::gloo_available,
       .join = [](HostShape shape, const CommunicatorOptions& o) { return join_hierarchical(shape, o, "gloo"); },
       .small_thresholds = hierarchical_thresholds(),
       .shapes = {two_hosts_of_two, three_hosts_of_two},
       .large_bytes = 0,
       .failure_shape = two_hosts_of_two,
       .reduce_scatter_order = CommunicatorFactory::Order::RankOrder,  // through the flat communicator
       .names_stalled_rank = false},
      // Parameter servers: small partitions, so that modest sizes cross many
      // of them and every server. Failures are ps_failures_test.cc's (the
      // servers take their timeouts from the environment, not from join()).
      {.name = "ps_2servers",
       .reports = "ps",
       .available = always,
       .join = join_ps,
       .small_thresholds = {{"KOLO_PS_PARTITION_BYTES", "4096"}},
       .shapes = {flat(2), flat(3)},
       .failure_shape = flat(0),
       .servers = 2},
      // More servers than workers, with BytePS's 4 MiB partitions.
      {.name = "ps_3servers",
       .reports = "ps",
       .available = always,
       .join = join_ps,
       .shapes = {flat(2)},
       .failure_shape = flat(0),
       .servers = 3},
      // One worker: its own collectives are the self communicator's, which
      // trusts the engine.
      {.name = "ps_1server",
       .reports = "ps",
       .available = always,
       .join = join_ps,
       .small_thresholds = {{"KOLO_PS_PARTITION_BYTES", "4096"}},
       .shapes = {flat(1)},
       .failure_shape = flat(0),
       .servers = 1,
       .refuses_bad_arguments = false},
      // mpirun, not the communicator, owns what happens when a rank dies or
      // stalls: those tests are in mpi_test.cc.
      {.name = "mpi",
       .reports = "mpi",
       .available = comm::mpi_available,
       .join = [](HostShape, const CommunicatorOptions& options) { return Member{nullptr, comm::make_mpi_communicator(options)}; },
       .shapes = {flat(3)},
       .failure_shape = flat(0),
       .under_mpirun = true,
       .allreduce_in_order_bytes = 64 * 1024,  // KOLO_MPI_SMALL_BYTES
       .large_allreduce_order = CommunicatorFactory::Order::Transports,
       .reduce_scatter_order = CommunicatorFactory::Order::Transports},
  };
}

}  // namespace

const std::vector<CommunicatorFactory>& communicator_factories() {
  static const std::vector<CommunicatorFactory> factories = make_factories();
  return factories;
}

std::vector<Job> collective_jobs() {
  std::vector<Job> jobs;
  for (const auto& factory : communicator_factories())
    for (HostShape shape : factory.shapes) jobs.push_back({&factory, shape});
  return jobs;
}

std::vector<Job> failure_jobs() {
  std::vector<Job> jobs;
  for (const auto& factory : communicator_factories())
    if (factory.failure_shape.ranks() > 0) jobs.push_back({&factory, factory.failure_shape});
  return jobs;
}

std::string job_name(const Job& job) {
  const HostShape s = job.shape;
  if (s.hosts > 1 || job.factory->name.rfind("hierarchical", 0) == 0)
    return job.factory->name + "_" + std::to_string(s.hosts) + (s.hosts == 1 ? "host" : "hosts") + "_of_" +
           std::to_string(s.per_host);
  return job.factory->name + "_" + std::to_string(s.ranks()) + (s.ranks() == 1 ? "rank" : "ranks");
}

void PrintTo(const Job& job, std::ostream* os) { *os << job_name(job); }

SpawnOptions spawn_options(const Job& job, const JobOptions& options) {
  SpawnOptions spawn;
  spawn.timeout = std::chrono::seconds(300);
  if (options.small_thresholds) spawn.env = job.factory->small_thresholds;
  spawn.servers = job.factory->servers;
  return spawn;
}

Member join_job(const Job& job, const comm::CommunicatorOptions& options) {
  return job.factory->join(job.shape, options);
}

namespace {

// Outside mpirun: starts this test again in `job.ranks()` MPI ranks. Inside: one of them.
void run_under_mpirun_job(const Job& job, const std::function<void(Member&)>& body, const JobOptions& options) {
  if (in_mpi_worker()) {
    Member m = join_job(job, options.communicator);
    ASSERT_EQ(m.comm->size(), job.ranks()) << "mpirun started another number of ranks";
    body(m);
    return;
  }
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string env;
  if (options.small_thresholds)
    for (const auto& [name, value] : job.factory->small_thresholds) env += "-x " + name + "=" + value + " ";
  const MpirunResult run =
      run_under_mpirun(job.ranks(), std::string(test->test_suite_name()) + "." + test->name(), env);
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(count_of(run.output, "[  PASSED  ] 1 test."), job.ranks()) << run.output;
}

}  // namespace

void run_job(const Job& job, const std::function<void(Member&)>& body, const JobOptions& options) {
  if (!job.factory->available()) GTEST_SKIP() << job.factory->name << " is not in this build";
  if (job.factory->under_mpirun) return run_under_mpirun_job(job, body, options);
  run_ranks(
      job.ranks(),
      [&](int) {
        Member m = join_job(job, options.communicator);
        body(m);
      },
      spawn_options(job, options));
}

}  // namespace kolo::testing
