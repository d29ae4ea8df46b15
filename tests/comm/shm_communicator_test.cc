// What only the shared-memory communicator does, on real processes and real
// shared memory: step counters through their wraparound, a segment name removed
// once everyone attached, a peer that closed early, arguments that disagree
// between ranks, stale segments, ranks that never come or disagree on the job
// size. Its collectives and failure contract are the communicator suites'
// (communicator_suite_test.cc, communicator_failures_test.cc).
#include "comm/shm/shm_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/shm/segment_checks.h"
#include "harness/communicator_data.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

testing::SpawnOptions shm_spawn_options(std::map<std::string, std::string> env = {}) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = std::chrono::seconds(120);
  options.env = std::move(env);
  return options;
}

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

// In a rank: joins the job the harness set up.
std::unique_ptr<Communicator> join_job(CommunicatorOptions options = {}) {
  return make_shm_communicator(env_int("KOLO_RANK"), env_int("KOLO_SIZE"), std::getenv("KOLO_JOB_ID"), options);
}

// Counters start just below 2^32, so the job runs through their wraparound.
TEST(ShmCommunicator, CountersWrapAround) {
  testing::run_ranks(
      3,
      [](int rank) {
        auto comm = join_job();
        for (int i = 0; i < 40; ++i) {
          const std::size_t count = i % 2 ? 3000 : 10;
          testing::Bytes in = testing::random_input(DataType::Int32, count, rank, i);
          testing::Bytes out(in.size());
          comm->allreduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum);
          ASSERT_TRUE(out == testing::reference_reduction(DataType::Int32, ReduceOp::Sum, count, {.per_host = 3}, i))
              << "iteration " << i;
          comm->barrier();
        }
      },
      shm_spawn_options({{"KOLO_SHM_FIRST_STEP", std::to_string(0xffffffffu - 25)},
                         {"KOLO_SHM_SLOT_BYTES", "4096"},
                         {"KOLO_SHM_SMALL_BYTES", "1024"}}));
}

TEST(ShmCommunicator, SegmentNameIsRemovedOnceEveryoneAttached) {
  testing::run_ranks(
      3,
      [](int) {
        auto comm = join_job();
        comm->barrier();
        EXPECT_FALSE(std::filesystem::exists("/dev/shm/kolo-" + std::string(std::getenv("KOLO_JOB_ID")) + "-shm"));
        comm->barrier();
      },
      shm_spawn_options());
}

// ---- failures -------------------------------------------------------------------------

TEST(ShmCommunicator, PeerThatClosedEarlyIsReported) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join_job();
        comm->barrier();
        if (rank == 1) {
          comm.reset();
          std::this_thread::sleep_for(600ms);  // still alive: only the closed state tells
          return;
        }
        try {
          comm->barrier();
          comm->barrier();
          ADD_FAILURE() << "barrier with a closed peer succeeded";
        } catch (const PeerFailureError& e) {
          EXPECT_NE(std::string(e.what()).find("closed"), std::string::npos) << e.what();
        }
      },
      shm_spawn_options());
}

TEST(ShmCommunicator, BadCollectiveArgumentsFailAlikeAndKeepTheRanksInStep) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join_job();
        std::vector<std::uint8_t> send(100), recv(100);
        std::vector<std::size_t> send_sizes = {10, 20};
        std::vector<std::size_t> recv_sizes = {10, rank == 0 ? std::size_t{25} : std::size_t{20}};
        EXPECT_THROW(comm->alltoallv(send.data(), send_sizes, recv.data(), recv_sizes), InvalidArgumentError);
        float x = 1, y = 0;
        comm->allreduce(&x, &y, 1, DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(y, 2.0f);
        EXPECT_THROW(comm->broadcast(&x, 4, 7), InvalidArgumentError);
        std::vector<std::size_t> wrong(3, 1);
        EXPECT_THROW(comm->reduce_scatter(&x, &y, wrong, DataType::Float32, ReduceOp::Sum), InvalidArgumentError);
        EXPECT_THROW(comm->allreduce(&x, &y, 1, DataType::Float32, ReduceOp::Average), InvalidArgumentError);
        EXPECT_THROW(comm->allreduce(&x, &y, 1, static_cast<DataType>(99), ReduceOp::Sum), InvalidArgumentError);
        // Rejected arguments leave the ranks in step.
        std::vector<float> big(100000, 1.0f), sum(100000);
        comm->allreduce(big.data(), sum.data(), big.size(), DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(sum[99999], 2.0f);
      },
      shm_spawn_options());
}

// Left by an earlier job of this user with the same id (and no secret): it
// carries the job's nonce.
TEST(ShmCommunicator, StaleSegmentIsAClearError) {
  const std::string job = testing::make_job_id();
  const std::string name = "/kolo-" + job + "-shm";
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 4096), 0);
  void* base = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(base, MAP_FAILED);
  const shm::Nonce nonce = shm::segment_nonce("", name);
  std::memcpy(static_cast<shm::SegmentHeader*>(base)->nonce, nonce.data(), nonce.size());
  ::munmap(base, 4096);
  ::close(fd);
  CommunicatorOptions options;
  options.connect_timeout = 500ms;
  try {
    make_shm_communicator(0, 2, job, options);
    ADD_FAILURE() << "joined over a stale segment";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stale"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::filesystem::exists("/dev/shm" + name)) << "must not delete a segment it did not create";
  ::shm_unlink(name.c_str());
}

TEST(ShmCommunicator, MissingRanksTimeOutNamingThem) {
  const std::string job = testing::make_job_id();
  CommunicatorOptions options;
  options.connect_timeout = 300ms;
  try {
    make_shm_communicator(0, 3, job, options);
    ADD_FAILURE() << "setup without peers succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks 1, 2"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/kolo-" + job + "-shm")) << "a failed setup left its segment";

  auto start = Clock::now();
  try {
    make_shm_communicator(1, 3, job, options);
    ADD_FAILURE() << "setup without rank 0 succeeded";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2s);
}

TEST(ShmCommunicator, RanksThatDisagreeOnSizeFail) {
  const std::string job = testing::make_job_id();
  CommunicatorOptions options;
  options.connect_timeout = 800ms;
  std::thread rank0([&] { EXPECT_THROW(make_shm_communicator(0, 2, job, options), TimeoutError); });
  std::this_thread::sleep_for(100ms);
  EXPECT_THROW(make_shm_communicator(1, 3, job, options), MismatchError);
  rank0.join();
}

TEST(ShmCommunicator, BadArgumentsAreRejected) {
  CommunicatorOptions options;
  EXPECT_THROW(make_shm_communicator(2, 2, "abc", options), InvalidArgumentError);
  EXPECT_THROW(make_shm_communicator(0, 0, "abc", options), InvalidArgumentError);
  EXPECT_THROW(make_shm_communicator(0, 2, "", options), InvalidArgumentError);
  EXPECT_THROW(make_shm_communicator(0, 2, "../etc", options), InvalidArgumentError);
}

}  // namespace
}  // namespace kolo::comm
