// The shared-memory communicator on real processes and real shared memory:
// every collective x dtype x size (0 bytes to more than the whole shared area)
// on 2, 3 and 4 ranks, checked against local references and bitwise across
// ranks; and the failure paths (killed, stopped, aborted and closed peers, stale
// segments, ranks that never come, bad arguments).
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

#include "common/half.h"
#include "common/reduce.h"
#include "harness/multiprocess.h"
#include "harness/time_bound.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using kolo::testing::time_bound;
using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr DataType kAllTypes[] = {DataType::UInt8,   DataType::Int8,     DataType::Int32,
                                  DataType::Int64,   DataType::Float16,  DataType::BFloat16,
                                  DataType::Float32, DataType::Float64,  DataType::Bool};
constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

// Small slots so that modest sizes cross many chunks and exceed the whole shared
// area (size x 2 slots), and a small one-step threshold so both allreduce paths run.
constexpr std::size_t kTestSlotBytes = 64 << 10;
constexpr std::size_t kTestSmallBytes = 4 << 10;

testing::SpawnOptions shm_spawn_options(std::map<std::string, std::string> env = {}) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = std::chrono::seconds(300);
  options.env = std::move(env);
  return options;
}

testing::SpawnOptions small_slot_options() {
  return shm_spawn_options({{"KOLO_SHM_SLOT_BYTES", std::to_string(kTestSlotBytes)},
                            {"KOLO_SHM_SMALL_BYTES", std::to_string(kTestSmallBytes)}});
}

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

// In a rank: joins the job the harness set up.
std::unique_ptr<Communicator> join_job(CommunicatorOptions options = {}) {
  return make_shm_communicator(env_int("KOLO_RANK"), env_int("KOLO_SIZE"), std::getenv("KOLO_JOB_ID"), options);
}

std::uint64_t fnv1a(const void* data, std::size_t bytes, std::uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Deterministic input of `rank` for one case, so that every rank can build every
// other rank's input and compute the reference locally (cheaply: the machine is
// small and shared).
Bytes make_input(DataType dtype, std::size_t count, int rank, std::uint64_t seed) {
  const std::size_t es = element_size(dtype);
  Bytes b(count * es);
  const std::uint64_t base = splitmix64(seed * 1000003 + static_cast<std::uint64_t>(rank));
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t h = splitmix64(base + i);
    const float real = static_cast<float>(h >> 40) * (4.0f / 16777216.0f) - 2.0f;  // [-2, 2)
    std::uint8_t* out = &b[i * es];
    switch (dtype) {
      case DataType::Float32: std::memcpy(out, &real, 4); break;
      case DataType::Float64: {
        double v = real * 1.0000001;
        std::memcpy(out, &v, 8);
        break;
      }
      case DataType::Float16:
      case DataType::BFloat16: {
        std::uint16_t v = dtype == DataType::Float16 ? float_to_fp16(real) : float_to_bf16(real);
        std::memcpy(out, &v, 2);
        break;
      }
      case DataType::Bool: *out = static_cast<std::uint8_t>(h % 3); break;
      default: std::memcpy(out, &h, es);
    }
  }
  return b;
}

Bytes reference_reduction(DataType dtype, ReduceOp op, std::size_t count, int size, std::uint64_t seed) {
  std::vector<Bytes> inputs;
  std::vector<const void*> ptrs;
  for (int r = 0; r < size; ++r) inputs.push_back(make_input(dtype, count, r, seed));
  for (auto& in : inputs) ptrs.push_back(in.data());
  Bytes out(count * element_size(dtype));
  reduce_many(out.data(), ptrs.data(), size, count, dtype, op);
  return out;
}

// Byte k of what rank `from` contributes to rank `to` in byte-level collectives.
std::uint8_t pattern(int from, int to, std::size_t k) {
  return static_cast<std::uint8_t>(from * 131 + to * 31 + k * 7 + (k >> 9));
}
Bytes pattern_bytes(int from, int to, std::size_t n) {
  Bytes b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = pattern(from, to, k);
  return b;
}

std::string describe(const char* what, DataType dtype, std::size_t count) {
  return std::string(what) + " " + to_string(dtype) + " count=" + std::to_string(count);
}

// Checks that every rank computed the same result hash (all results bitwise equal).
void expect_same_hash_everywhere(Communicator& comm, std::uint64_t hash) {
  const int n = comm.size();
  std::vector<std::size_t> sizes(n, sizeof hash);
  std::vector<std::uint64_t> all(n);
  comm.allgatherv(&hash, sizeof hash, all.data(), sizes);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], hash) << "rank " << r << " computed different bits";
}

// 0, 1, an amount under the one-step threshold and odd ones over it; plus, for
// some ops, 1 MiB, far more than the test's shared area.
std::vector<std::size_t> counts_for(DataType dtype, ReduceOp op) {
  std::vector<std::size_t> counts = {0, 1, 1000, 7919};
  if (op == ReduceOp::Sum || op == ReduceOp::Min) counts.push_back((1u << 20) / element_size(dtype));
  return counts;
}

void sweep_allreduce(Communicator& comm, std::uint64_t& result_hash) {
  std::uint64_t seed = 1;
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kReduceOps) {
      for (std::size_t count : counts_for(dtype, op)) {
        ++seed;
        Bytes in = make_input(dtype, count, comm.rank(), seed);
        Bytes expected = reference_reduction(dtype, op, count, comm.size(), seed);
        Bytes out(in.size(), 0xcd);
        comm.allreduce(in.data(), out.data(), count, dtype, op);
        ASSERT_TRUE(out == expected) << describe("allreduce", dtype, count) << " " << to_string(op);
        ASSERT_EQ(in, make_input(dtype, count, comm.rank(), seed)) << "allreduce modified its input";
        if (count == 7919 || count == 1) {  // in place
          comm.allreduce(in.data(), in.data(), count, dtype, op);
          ASSERT_TRUE(in == expected) << describe("in-place allreduce", dtype, count) << " " << to_string(op);
        }
        result_hash = fnv1a(out.data(), out.size(), result_hash);
      }
    }
  }
}

void sweep_reduce_scatter(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  std::uint64_t seed = 100000;
  for (DataType dtype : kAllTypes) {
    const std::size_t es = element_size(dtype);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      for (std::size_t c : counts_for(dtype, op)) {
        ++seed;
        std::vector<std::size_t> counts(n);
        for (int j = 0; j < n; ++j) counts[j] = c * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(n);
        std::size_t total = 0, offset = 0;
        for (int j = 0; j < n; ++j) total += counts[j];
        for (int j = 0; j < me; ++j) offset += counts[j];
        Bytes in = make_input(dtype, total, me, seed);
        Bytes full = reference_reduction(dtype, op, total, n, seed);
        Bytes expected(full.begin() + offset * es, full.begin() + (offset + counts[me]) * es);
        Bytes out(counts[me] * es, 0xcd);
        comm.reduce_scatter(in.data(), out.data(), counts, dtype, op);
        ASSERT_TRUE(out == expected) << describe("reduce_scatter", dtype, c) << " " << to_string(op);
        // In place: the output is this rank's block of the input.
        comm.reduce_scatter(in.data(), in.data() + offset * es, counts, dtype, op);
        ASSERT_TRUE(Bytes(in.begin() + offset * es, in.begin() + (offset + counts[me]) * es) == expected)
            << describe("in-place reduce_scatter", dtype, c);
      }
    }
  }
  // The output at the start of the input (an overlap that is not this rank's block).
  std::vector<std::size_t> counts(n, 5000);
  Bytes in = make_input(DataType::Float32, 5000 * n, me, 77);
  Bytes full = reference_reduction(DataType::Float32, ReduceOp::Sum, 5000 * n, n, 77);
  comm.reduce_scatter(in.data(), in.data(), counts, DataType::Float32, ReduceOp::Sum);
  EXPECT_TRUE(std::equal(in.begin(), in.begin() + 5000 * 4, full.begin() + me * 5000 * 4))
      << "overlapping reduce_scatter";
}

std::vector<std::size_t> byte_sizes(std::size_t case_bytes, int n) {
  std::vector<std::size_t> sizes(n);
  for (int j = 0; j < n; ++j) sizes[j] = case_bytes * static_cast<std::size_t>(j + 1) / static_cast<std::size_t>(n);
  return sizes;
}

const std::size_t kByteCases[] = {0, 1, 7919, 1 << 20, (1 << 20) + 333};

void sweep_gathers(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  int round = 0;
  for (std::size_t case_bytes : kByteCases) {
    std::vector<std::size_t> sizes = byte_sizes(case_bytes, n);
    std::size_t total = 0;
    for (auto s : sizes) total += s;
    Bytes expected;
    for (int j = 0; j < n; ++j) {
      Bytes part = pattern_bytes(j, 0, sizes[j]);
      expected.insert(expected.end(), part.begin(), part.end());
    }
    Bytes mine = pattern_bytes(me, 0, sizes[me]);

    Bytes out(total, 0xcd);
    comm.allgatherv(mine.data(), mine.size(), out.data(), sizes);
    ASSERT_TRUE(out == expected) << "allgatherv bytes=" << case_bytes;

    // In place: this rank's block of the output already holds its data.
    std::size_t offset = 0;
    for (int j = 0; j < me; ++j) offset += sizes[j];
    Bytes inplace(total, 0xcd);
    std::copy(mine.begin(), mine.end(), inplace.begin() + offset);
    comm.allgatherv(inplace.data() + offset, mine.size(), inplace.data(), sizes);
    ASSERT_TRUE(inplace == expected) << "in-place allgatherv bytes=" << case_bytes;

    const int root = round++ % n;
    Bytes gathered(me == root ? total : 0, 0xcd);
    comm.gatherv(mine.data(), mine.size(), me == root ? gathered.data() : nullptr, sizes, root);
    if (me == root) {
      ASSERT_TRUE(gathered == expected) << "gatherv root=" << root << " bytes=" << case_bytes;
    }

    Bytes buffer = me == root ? pattern_bytes(root, 1, case_bytes) : Bytes(case_bytes, 0xcd);
    comm.broadcast(buffer.data(), buffer.size(), root);
    ASSERT_TRUE(buffer == pattern_bytes(root, 1, case_bytes)) << "broadcast root=" << root << " bytes=" << case_bytes;
  }
}

std::size_t alltoall_bytes(std::size_t case_bytes, int from, int to, int n) {
  return case_bytes * static_cast<std::size_t>((from + 2 * to) % n + 1) / static_cast<std::size_t>(2 * n);
}

void sweep_alltoall(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  for (std::size_t case_bytes : kByteCases) {
    std::vector<std::size_t> send_sizes(n), recv_sizes(n);
    Bytes send, expected;
    for (int j = 0; j < n; ++j) {
      send_sizes[j] = alltoall_bytes(case_bytes, me, j, n);
      recv_sizes[j] = alltoall_bytes(case_bytes, j, me, n);
      Bytes out = pattern_bytes(me, j, send_sizes[j]), in = pattern_bytes(j, me, recv_sizes[j]);
      send.insert(send.end(), out.begin(), out.end());
      expected.insert(expected.end(), in.begin(), in.end());
    }
    Bytes recv(expected.size(), 0xcd);
    comm.alltoallv(send.data(), send_sizes, recv.data(), recv_sizes);
    ASSERT_TRUE(recv == expected) << "alltoallv bytes=" << case_bytes;

    // In place: send and receive layouts share one buffer.
    Bytes shared = send;
    shared.resize(std::max(send.size(), expected.size()));
    comm.alltoallv(shared.data(), send_sizes, shared.data(), recv_sizes);
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(), shared.begin()))
        << "in-place alltoallv bytes=" << case_bytes;
  }
}

void run_sweep(int n) {
  testing::run_ranks(
      n,
      [](int) {
        auto comm = join_job();
        EXPECT_EQ(comm->name(), "shm");
        std::uint64_t hash = 0;
        sweep_allreduce(*comm, hash);
        sweep_reduce_scatter(*comm);
        expect_same_hash_everywhere(*comm, hash);
        sweep_gathers(*comm);
        sweep_alltoall(*comm);
        for (int i = 0; i < 5; ++i) comm->barrier();
      },
      small_slot_options());
}

TEST(ShmCommunicator, SweepTwoRanks) { run_sweep(2); }
TEST(ShmCommunicator, SweepThreeRanks) { run_sweep(3); }
TEST(ShmCommunicator, SweepFourRanks) { run_sweep(4); }

// The default configuration, and a buffer larger than the whole shared area.
TEST(ShmCommunicator, LargeAllreduceWithDefaultSlots) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join_job();
        const std::size_t count = 1'500'007;  // 6 MB of float32, more than the default area (4 MiB)
        Bytes in = make_input(DataType::Float32, count, rank, 5);
        Bytes out(in.size());
        comm->allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
        EXPECT_TRUE(out == reference_reduction(DataType::Float32, ReduceOp::Sum, count, 2, 5));
        for (std::size_t count : {std::size_t{1}, std::size_t{16384}, std::size_t{16385}}) {  // around 64 KiB
          Bytes a = make_input(DataType::Float32, count, rank, count);
          Bytes b(a.size());
          comm->allreduce(a.data(), b.data(), count, DataType::Float32, ReduceOp::Sum);
          EXPECT_TRUE(b == reference_reduction(DataType::Float32, ReduceOp::Sum, count, 2, count)) << count;
        }
      },
      shm_spawn_options());
}

// Counters start just below 2^32, so the job runs through their wraparound.
TEST(ShmCommunicator, CountersWrapAround) {
  testing::run_ranks(
      3,
      [](int rank) {
        auto comm = join_job();
        for (int i = 0; i < 40; ++i) {
          const std::size_t count = i % 2 ? 3000 : 10;
          Bytes in = make_input(DataType::Int32, count, rank, i);
          Bytes out(in.size());
          comm->allreduce(in.data(), out.data(), count, DataType::Int32, ReduceOp::Sum);
          ASSERT_TRUE(out == reference_reduction(DataType::Int32, ReduceOp::Sum, count, 3, i)) << "iteration " << i;
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

TEST(ShmCommunicator, KilledPeerIsNamedWithinSeconds) {
  auto options = shm_spawn_options();
  options.grace = std::chrono::seconds(15);
  auto outcomes = testing::spawn_ranks(
      3,
      [](int rank) {
        auto comm = join_job();
        const std::size_t count = 4 << 20;
        std::vector<float> in(count, 1.0f), out(count);
        comm->allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
        if (rank == 2) {
          // Dies at a random point inside the following allreduces.
          std::thread([] {
            std::this_thread::sleep_for(30ms);
            ::raise(SIGKILL);
          }).detach();
        }
        auto last_success = Clock::now();
        try {
          for (int i = 0; i < 100000; ++i) {
            comm->allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
            last_success = Clock::now();
          }
          ADD_FAILURE() << "no error after rank 2 was killed";
        } catch (const PeerFailureError& e) {
          EXPECT_EQ(e.peer_rank(), 2) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("died"), std::string::npos) << e.what();
          EXPECT_LT(Clock::now() - last_success, 3s);
          // The communicator stays failed, with the same error.
          try {
            comm->barrier();
            ADD_FAILURE() << "barrier after a peer failure succeeded";
          } catch (const PeerFailureError& again) {
            EXPECT_STREQ(again.what(), e.what());
          }
        }
      },
      options);
  ASSERT_EQ(outcomes.size(), 3u);
  EXPECT_EQ(outcomes[2].signal, SIGKILL);
  for (int r : {0, 1}) EXPECT_TRUE(outcomes[r].exited && outcomes[r].exit_code == 0) << "rank " << r;
}

TEST(ShmCommunicator, StoppedPeerFailsAfterPeerTimeout) {
  testing::run_ranks(
      3,
      [](int rank) {
        CommunicatorOptions options;
        options.peer_timeout = 400ms;
        auto comm = join_job(options);
        std::int32_t pid = ::getpid();
        std::vector<std::int32_t> pids(3);
        std::vector<std::size_t> sizes(3, sizeof pid);
        comm->allgatherv(&pid, sizeof pid, pids.data(), sizes);
        if (rank == 0) ::kill(pids[1], SIGSTOP);
        auto start = Clock::now();
        try {
          for (int i = 0; i < 1000000; ++i) comm->barrier();
          ADD_FAILURE() << "no error while rank 1 is stopped";
        } catch (const PeerFailureError& e) {
          if (rank != 1) {
            EXPECT_EQ(e.peer_rank(), 1) << e.what();
            EXPECT_NE(std::string(e.what()).find("no progress"), std::string::npos) << e.what();
            EXPECT_LT(Clock::now() - start, 3s);
          }
        }
        if (rank == 0) {
          std::this_thread::sleep_for(1000ms);  // until rank 2 has failed as well
          ::kill(pids[1], SIGCONT);             // rank 1 then finds its peers gone
        }
      },
      shm_spawn_options());
}

TEST(ShmCommunicator, AbortUnblocksAWaitingCall) {
  testing::run_ranks(
      2,
      [](int rank) {
        auto comm = join_job();
        comm->barrier();
        float x = 1, y = 0;
        if (rank == 0) {
          Clock::time_point aborted_at;
          std::thread aborter([&] {
            std::this_thread::sleep_for(200ms);
            aborted_at = Clock::now();
            comm->abort("test abort");
          });
          // Rank 1 is not calling yet: this waits until the abort.
          EXPECT_THROW(
              {
                try {
                  comm->allreduce(&x, &y, 1, DataType::Float32, ReduceOp::Sum);
                } catch (const ShutdownError& e) {
                  EXPECT_STREQ(e.what(), "test abort");
                  EXPECT_LT(Clock::now() - aborted_at, time_bound(100ms));
                  throw;
                }
              },
              ShutdownError);
          aborter.join();
          EXPECT_THROW(comm->barrier(), ShutdownError);
          EXPECT_THROW(comm->broadcast(&x, 4, 0), ShutdownError);
        } else {
          std::this_thread::sleep_for(500ms);
          // Rank 0 posted its data before it aborted, so the first call may still
          // complete; after that rank 0 is known to have aborted.
          try {
            for (int i = 0; i < 3; ++i) comm->allreduce(&x, &y, 1, DataType::Float32, ReduceOp::Sum);
            ADD_FAILURE() << "no error after rank 0 aborted";
          } catch (const PeerFailureError& e) {
            EXPECT_EQ(e.peer_rank(), 0);
            EXPECT_NE(std::string(e.what()).find("aborted: test abort"), std::string::npos) << e.what();
          }
        }
      },
      shm_spawn_options());
}

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

TEST(ShmCommunicator, StaleSegmentIsAClearError) {
  const std::string job = testing::make_job_id();
  const std::string name = "/kolo-" + job + "-shm";
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
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
