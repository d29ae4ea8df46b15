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

#include <array>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/communicator_choice.h"
#include "bootstrap/topology.h"
#include "common/reduce.h"
#include "harness/agreement.h"
#include "harness/collective_suite.h"
#include "harness/values.h"
#include "kolo/error.h"
#include "kolo/kolo.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool in_mpi_worker() { return std::getenv("KOLO_MPI_WORKER") != nullptr && std::getenv("OMPI_COMM_WORLD_RANK"); }

#define KOLO_ONLY_UNDER_MPIRUN() \
  if (!in_mpi_worker()) GTEST_SKIP() << "runs inside mpirun (started by the MpiLaunch tests)"

std::string self_path() {
  char buf[4096] = {};
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

struct MpirunResult {
  int status = -1;
  std::string output;
  double seconds = 0;
};

// Runs this binary's worker tests matching `filter` on `ranks` MPI ranks.
MpirunResult mpirun(int ranks, const std::string& filter, const std::string& extra_env = "") {
  if (!mpi_available()) return {};
  std::string command = "timeout -s KILL 120 mpirun --allow-run-as-root --oversubscribe "
                        "--mca btl self,vader --mca btl_vader_single_copy_mechanism none "
                        "--mca oob_tcp_if_include lo -x KOLO_MPI_WORKER=1 " +
                        extra_env + " -np " + std::to_string(ranks) + " " + self_path() +
                        " --gtest_color=no --gtest_filter='" + filter + "' 2>&1";
  MpirunResult run;
  auto start = Clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return run;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), buf.size(), pipe)) run.output += buf.data();
  run.status = pclose(pipe);
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return run;
}

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + 1)) ++n;
  return n;
}

// ---- launched from the normal test run -------------------------------------------------

TEST(MpiLaunch, PublicApiUnderMpirunWithoutKolorun) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  for (int ranks : {2, 3, 4}) {
    MpirunResult run = mpirun(ranks, "MpiWorker.Bootstrap*:MpiWorker.PublicApi*:MpiWorker.Communicator*");
    EXPECT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(count_of(run.output, "[  PASSED  ] 3 tests."), ranks) << run.output;
  }
}

TEST(MpiLaunch, BlockedRankSleepsInsteadOfSpinning) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  MpirunResult run = mpirun(2, "MpiWorker.BlockedRank");
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(count_of(run.output, "[  PASSED  ] 1 test."), 2) << run.output;
  for (auto pos = run.output.find("MPI "); pos != std::string::npos; pos = run.output.find("MPI ", pos + 1))
    std::printf("%s\n", run.output.substr(pos, run.output.find('\n', pos) - pos).c_str());
}

TEST(MpiLaunch, StalledPeerIsReportedAndTheJobEnds) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  MpirunResult run = mpirun(2, "MpiWorker.StalledPeer");
  EXPECT_NE(run.output.find("caught: PeerFailureError"), std::string::npos) << run.output;
  // The abandoned request makes rank 0 end the job with MPI_Abort instead of
  // hanging in MPI_Finalize; the sleeping rank is killed by mpirun.
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_LT(run.seconds, 30) << run.output;
}

TEST(MpiLaunch, AbortWakesAWaitingRank) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  MpirunResult run = mpirun(2, "MpiWorker.Abort");
  EXPECT_NE(run.output.find("caught: ShutdownError: test abort"), std::string::npos) << run.output;
  EXPECT_LT(run.seconds, 30) << run.output;
}

TEST(MpiLaunch, KilledRankEndsTheWholeJob) {
  if (!mpi_available()) GTEST_SKIP() << "built without MPI";
  MpirunResult run = mpirun(3, "MpiWorker.Killed");
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

std::vector<float> random_floats(std::size_t count, int rank) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = real(rng);
  return v;
}

TEST(MpiWorker, CommunicatorBitwiseIdentityAndSmallPathMatchesRankOrder) {
  KOLO_ONLY_UNDER_MPIRUN();
  auto comm = make_mpi_communicator({});
  const int n = comm->size();
  for (std::size_t count : {std::size_t{1000}, std::size_t{1 << 20}}) {
    auto data = random_floats(count, comm->rank());
    comm->allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
    std::uint64_t mine = testing::fnv1a(data.data(), count * 4);
    std::vector<std::uint64_t> all(n);
    std::vector<std::size_t> sizes(n, 8);
    comm->allgatherv(&mine, 8, all.data(), sizes);
    for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], mine) << "rank " << r << " got other bits, count " << count;
    if (count * 4 <= 64 * 1024) {
      // The small path reduces in rank order with reduce_many: shm's bits.
      std::vector<std::vector<float>> inputs;
      std::vector<const void*> ptrs;
      for (int r = 0; r < n; ++r) inputs.push_back(random_floats(count, r));
      for (auto& in : inputs) ptrs.push_back(in.data());
      std::vector<float> want(count);
      reduce_many(want.data(), ptrs.data(), n, count, DataType::Float32, ReduceOp::Sum);
      EXPECT_EQ(0, std::memcmp(want.data(), data.data(), count * 4));
    }
  }
  EXPECT_THROW(comm->broadcast(nullptr, 0, n), InvalidArgumentError);
  comm->barrier();
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
  setenv("KOLO_MPI_SPIN_US", "100000000", 1);  // spin like a blocking MPI call
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
