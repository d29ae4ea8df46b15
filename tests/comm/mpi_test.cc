// The MPI communicator and bootstrap from mpirun: this binary runs itself under
// `mpirun --allow-run-as-root --oversubscribe -np N` (no kolorun), and the
// MpiWorker tests, which skip unless KOLO_MPI_WORKER is set, run inside the MPI
// ranks: kolo::init() must find rank, size and local rank from mpirun's
// environment and choose the MPI communicator, and every collective of the public
// API must give correct results that are identical bit for bit on every rank.
//
// SPINNING. MPI implementations make progress only inside MPI calls, and blocking
// calls spin: a rank that waits in MPI_Barrier for a late peer keeps a core at
// 100%. kolo's MPI communicator polls non-blocking operations instead (mpi_wait.h):
// it spins for KOLO_MPI_SPIN_US (default 500 us), then tests every
// KOLO_MPI_POLL_US (default 100 us) and sleeps in between. MpiWorker.BlockedRank
// prints the CPU share of a rank blocked for 2 s behind a late peer and the small
// allreduce latency, for the default and for pure spinning; numbers and the
// trade-off are in docs/communicators-across-hosts.md.
#include "comm/mpi/mpi_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/communicator_choice.h"
#include "bootstrap/topology.h"
#include "harness/collective_suite.h"
#include "harness/mpirun.h"
#include "kolo/error.h"
#include "kolo/kolo.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::count_of;
using testing::in_mpi_worker;

#define KOLO_ONLY_UNDER_MPIRUN() \
  if (!in_mpi_worker()) GTEST_SKIP() << "runs inside mpirun (started by the MpiLaunch tests)"

// Runs this binary's worker tests matching `filter` on `ranks` MPI ranks.
testing::MpirunResult mpirun(int ranks, const std::string& filter) {
  if (!mpi_available()) return {};
  return testing::run_under_mpirun(ranks, filter);
}

// ---- launched from the normal test run -------------------------------------------------

TEST(MpiLaunch, PublicApiUnderMpirunWithoutKolorun) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  for (int ranks : {2, 3, 4}) {
    testing::MpirunResult run = mpirun(ranks, "MpiWorker.Bootstrap*:MpiWorker.PublicApi*");
    EXPECT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(count_of(run.output, "[  PASSED  ] 2 tests."), ranks) << run.output;
  }
}

TEST(MpiLaunch, BlockedRankSleepsInsteadOfSpinning) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  testing::MpirunResult run = mpirun(2, "MpiWorker.BlockedRank");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(count_of(run.output, "[  PASSED  ] 1 test."), 2) << run.output;
  for (auto pos = run.output.find("MPI "); pos != std::string::npos; pos = run.output.find("MPI ", pos + 1))
    std::printf("%s\n", run.output.substr(pos, run.output.find('\n', pos) - pos).c_str());
}

TEST(MpiLaunch, StalledPeerIsReportedAndTheJobEnds) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  testing::MpirunResult run = mpirun(2, "MpiWorker.StalledPeer");
  EXPECT_NE(run.output.find("caught: PeerFailureError"), std::string::npos) << run.output;
  // The abandoned request makes rank 0 end the job with MPI_Abort instead of
  // hanging in MPI_Finalize; the sleeping rank is killed by mpirun.
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_LT(run.seconds, 30) << run.output;
}

TEST(MpiLaunch, AbortWakesAWaitingRank) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  testing::MpirunResult run = mpirun(2, "MpiWorker.Abort");
  EXPECT_NE(run.output.find("caught: ShutdownError: test abort"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 30) << run.output;
}

TEST(MpiLaunch, KilledRankEndsTheWholeJob) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  testing::MpirunResult run = mpirun(3, "MpiWorker.Killed");
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_LT(run.seconds, 30) << run.output;
}

// ---- inside mpirun ------------------------------------------------------------------

TEST(MpiWorker, BootstrapFromMpirunEnvironment) {
  KOLO_ONLY_UNDER_MPIRUN();
  Topology t = topology_from_env();
  EXPECT_EQ(t.launcher, Launcher::Mpirun);
  EXPECT_EQ(t.rank, std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
  EXPECT_EQ(t.size, std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(t.local_size, t.size);  // one host
  EXPECT_EQ(t.cross_size, 1);
  EXPECT_TRUE(t.store_addr.empty());
  auto comm = make_communicator(t, 100, nullptr);
  EXPECT_EQ(comm->name(), "mpi");
  EXPECT_EQ(comm->rank(), t.rank);
  comm->barrier();
}

TEST(MpiWorker, PublicApiCollectives) {
  KOLO_ONLY_UNDER_MPIRUN();
  // The harness's collective suite at moderate sizes (the fusion threshold
  // lowered below the largest); kolorun_multihost_test.cc runs it whole under
  // mpirun and kolorun --mpi.
  constexpr std::int64_t kFusionThreshold = 4 * 1024;
  setenv("KOLO_FUSION_THRESHOLD", std::to_string(kFusionThreshold).c_str(), 1);
  kolo::init();
  EXPECT_EQ(kolo::size(), std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")));
  EXPECT_EQ(kolo::local_rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")));
  testing::SuiteFailures failures([](const std::string& message) { ADD_FAILURE() << message; });
  testing::sweep_every_collective({.fusion_threshold = kFusionThreshold, .large_bytes = 64 * 1024}, failures);
  testing::check_barrier_grouped_and_join(failures);
  kolo::shutdown();
}

double cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_stime.tv_sec + (usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

struct BlockedMeasure {
  double cpu_share = 0;  // of rank 0, blocked 2 s behind rank 1
  double latency_us = 0;
};

BlockedMeasure measure_blocked_rank(Communicator& comm) {
  BlockedMeasure m;
  comm.barrier();
  double value = 1;
  const int reps = 2000;
  auto start = Clock::now();
  for (int i = 0; i < reps; ++i) comm.allreduce(&value, &value, 1, DataType::Float64, ReduceOp::Max);
  m.latency_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / reps;
  if (comm.rank() == 1) {
    std::this_thread::sleep_for(2s);
    comm.barrier();
  } else {
    const double cpu_before = cpu_seconds();
    auto wait_start = Clock::now();
    comm.barrier();
    m.cpu_share = (cpu_seconds() - cpu_before) / std::chrono::duration<double>(Clock::now() - wait_start).count();
  }
  comm.barrier();
  return m;
}

TEST(MpiWorker, BlockedRank) {
  KOLO_ONLY_UNDER_MPIRUN();
  auto polite = make_mpi_communicator({});
  auto polite_m = measure_blocked_rank(*polite);
  setenv("KOLO_MPI_SPIN_US", "1000000", 1);  // the most: spin half the 2 s wait, like a blocking MPI call
  auto spinning = make_mpi_communicator({});
  auto spinning_m = measure_blocked_rank(*spinning);
  unsetenv("KOLO_MPI_SPIN_US");
  if (polite->rank() == 0) {
    std::printf("MPI default polling: blocked rank used %.1f%% of a core; 8-byte allreduce %.1f us\n",
                100 * polite_m.cpu_share, polite_m.latency_us);
    std::printf("MPI pure spinning:   blocked rank used %.1f%% of a core; 8-byte allreduce %.1f us\n",
                100 * spinning_m.cpu_share, spinning_m.latency_us);
    // Spinning takes whatever the (shared, often loaded) machine gives it, up to a
    // whole core; polling must stay small and below it.
    EXPECT_LT(polite_m.cpu_share, 0.25);
    EXPECT_LT(polite_m.cpu_share, spinning_m.cpu_share);
  }
}

TEST(MpiWorker, StalledPeer) {
  KOLO_ONLY_UNDER_MPIRUN();
  CommunicatorOptions options;
  options.peer_timeout = 1s;
  auto comm = make_mpi_communicator(options);
  comm->barrier();
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(20s);  // mpirun kills it when rank 0 aborts the job
    return;
  }
  try {
    comm->barrier();
  } catch (const PeerFailureError& e) {
    std::printf("caught: PeerFailureError: %s\n", e.what());
    std::fflush(stdout);
  }
  EXPECT_THROW(comm->barrier(), PeerFailureError);
}

TEST(MpiWorker, Abort) {
  KOLO_ONLY_UNDER_MPIRUN();
  auto comm = make_mpi_communicator({});
  comm->barrier();
  if (comm->rank() == 1) {
    std::this_thread::sleep_for(20s);
    return;
  }
  std::thread aborter([&] {
    std::this_thread::sleep_for(200ms);
    comm->abort("test abort");
  });
  try {
    comm->barrier();
  } catch (const ShutdownError& e) {
    std::printf("caught: ShutdownError: %s\n", e.what());
    std::fflush(stdout);
  }
  aborter.join();
}

TEST(MpiWorker, Killed) {
  KOLO_ONLY_UNDER_MPIRUN();
  auto comm = make_mpi_communicator({});
  comm->barrier();
  if (comm->rank() == 1) raise(SIGKILL);
  comm->barrier();  // never completes: mpirun ends the job
}

}  // namespace
}  // namespace kolo::comm
