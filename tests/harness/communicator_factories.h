// Every communicator of kolo as the communicator suites see it: how a rank joins
// a job of it, which jobs the suites run on it, and what it promises beyond the
// interface's contract. communicator_suite_test.cc and
// communicator_failures_test.cc run on every entry of communicator_factories();
// a new transport is one more entry there (communicator_factories.cc).
#pragma once

#include <cstddef>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "harness/communicator_data.h"
#include "harness/multiprocess.h"
#include "store/store.h"

namespace kolo::testing {

// A rank's membership of a job. The store (null where the ranks have none: mpi)
// must outlive the communicator.
struct Member {
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<comm::Communicator> comm;
};

struct CommunicatorFactory {
  // In test names ("shm_3ranks", "hierarchical_over_gloo_2hosts_of_2").
  std::string name;
  // What Communicator::name() says.
  std::string reports;
  // False where this build lacks the transport: its tests skip.
  std::function<bool()> available;
  // In a rank: joins the job of `shape` that the harness started (KOLO_RANK,
  // KOLO_SIZE, KOLO_JOB_ID, the store), with `options` (peer and connect timeouts).
  std::function<Member(HostShape shape, const comm::CommunicatorOptions& options)> join;
  // Environment for every rank that lowers the transport's thresholds, so that
  // modest sizes take each of its paths; the default thresholds are tested too.
  std::map<std::string, std::string> small_thresholds;
  // The jobs the collective suite runs.
  std::vector<HostShape> shapes;
  // Reductions also run on this many bytes of each dtype (0: none), past the
  // whole shared area of the lowered shm slots and MPI's small path. Over gloo
  // each lowered 4 KiB round waits on libgloo's I/O thread, so its reductions
  // stop at the suite's largest count, already many rounds.
  std::size_t large_bytes = 1 << 20;
  // The job the failure suite runs (ranks() < 2: only abort applies).
  HostShape failure_shape;
  // Ranks started by mpirun instead of forked by the harness (run_job).
  bool under_mpirun = false;
  // Parameter servers the harness starts beside the ranks (comm/ps).
  int servers = 0;

  // The order of a reduction: each host's ranks, then the hosts
  // (reference_reduction with the job's shape; flat jobs are one host); all ranks
  // in rank order whatever the hosts; or the transport's own association (MPI's),
  // where the bits still agree on every rank and floating-point sums and products
  // are compared with the reference within a rounding tolerance.
  enum class Order { HostByHost, RankOrder, Transports };
  // Allreduces of up to this many bytes are HostByHost; larger ones `large_allreduce_order`.
  std::size_t allreduce_in_order_bytes = std::numeric_limits<std::size_t>::max();
  Order large_allreduce_order = Order::HostByHost;
  Order reduce_scatter_order = Order::HostByHost;
  // Calls with bad arguments (a root or a count list that does not fit the job,
  // Average) throw InvalidArgumentError on every rank. The self communicator
  // trusts the engine, which never makes them.
  bool refuses_bad_arguments = true;

  // The failure contract. What a survivor's PeerFailureError says beyond the
  // rank, for a killed peer and for a stopped one ("" : nothing more).
  std::string killed_peer_words;
  std::string stalled_peer_words;
  // Survivors name the stopped rank itself. Else they agree on one rank (the
  // job-wide verdict), which may be a rank waiting on the stopped one: the
  // hierarchical parts time out at the same moment, and a host leader stuck in
  // its host's barrier looks stalled to the other hosts.
  bool names_stalled_rank = true;
  // Non-empty: a peer of a rank that called abort() learns it, as a
  // PeerFailureError naming that rank and saying this (with the reason).
  std::string abort_seen_by_peers;
};

const std::vector<CommunicatorFactory>& communicator_factories();

// One job of a suite: a factory and where the job's ranks run.
struct Job {
  const CommunicatorFactory* factory = nullptr;
  HostShape shape;
  int ranks() const { return shape.ranks(); }
};

// Every factory with each of its shapes.
std::vector<Job> collective_jobs();
// Every factory with its failure shape.
std::vector<Job> failure_jobs();
// "shm_3ranks", "tcp_1rank", "hierarchical_2hosts_of_2".
std::string job_name(const Job& job);
// GoogleTest prints a Job by its name.
void PrintTo(const Job& job, std::ostream* os);

struct JobOptions {
  // The factory's small_thresholds (else the transport's defaults).
  bool small_thresholds = true;
  comm::CommunicatorOptions communicator{};
};

// Runs `body` on every rank of the job, each with its membership; any rank's
// GoogleTest failure, exception or bad exit fails the calling test. Skips the
// test when the build lacks the transport. Under mpirun this test is run again
// in the MPI ranks (which then run body); call it once per test.
void run_job(const Job& job, const std::function<void(Member&)>& body, const JobOptions& options = {});

// For failure tests that judge the ranks' outcomes themselves (forked ranks only).
SpawnOptions spawn_options(const Job& job, const JobOptions& options = {});
Member join_job(const Job& job, const comm::CommunicatorOptions& options = {});

}  // namespace kolo::testing
