// The TCP communicators (gloo's transport, and kolo's own sockets: the same
// suite runs on each) on real processes and real loopback sockets: every
// collective x dtype x size (0, odd, several reduce-scatter rounds) on 2, 3 and 4
// ranks, checked bit for bit against reduce_many in rank order (what the shm
// communicator computes) and across ranks; and the failure paths (killed and
// stopped peers, abort() from another thread, ranks that never come, bad
// arguments and addresses).
#include "comm/gloo/gloo_communicator.h"
#include "comm/tcp/tcp_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/half.h"
#include "common/reduce.h"
#include "harness/multiprocess.h"
#include "kolo/error.h"
#include "store/store.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr DataType kAllTypes[] = {DataType::UInt8,   DataType::Int8,    DataType::Int32,
                                  DataType::Int64,   DataType::Float16, DataType::BFloat16,
                                  DataType::Float32, DataType::Float64, DataType::Bool};
constexpr ReduceOp kReduceOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

// Small thresholds so that modest sizes take the reduce-scatter path over many rounds.
constexpr std::size_t kTestSmallBytes = 1024;
constexpr std::size_t kTestRoundBytes = 4096;

// The transport under test, set by each test's fixture (ranks are forked from it).
enum class Transport { Gloo, Tcp };
Transport g_transport = Transport::Gloo;

const char* transport_name(Transport t) { return t == Transport::Tcp ? "tcp" : "gloo"; }

testing::SpawnOptions gloo_options(std::map<std::string, std::string> env = {}) {
  testing::SpawnOptions options;
  options.timeout = 60s;
  for (const char* prefix : {"KOLO_GLOO", "KOLO_TCP"}) {
    env.emplace(std::string(prefix) + "_SMALL_BYTES", std::to_string(kTestSmallBytes));
    env.emplace(std::string(prefix) + "_ROUND_BYTES", std::to_string(kTestRoundBytes));
  }
  options.env = std::move(env);
  return options;
}

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

std::unique_ptr<store::StoreClient> connect_store() {
  std::string addr = std::getenv("KOLO_STORE_ADDR");
  auto colon = addr.rfind(':');
  return store::StoreClient::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)),
                                     std::getenv("KOLO_SECRET"), 10s);
}

// A rank's membership of the job: the store must outlive the communicator.
struct Member {
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<Communicator> comm;
};

std::unique_ptr<GlooCommunicator> make_communicator(const GlooGroup& group, store::StoreClient& store,
                                                    const GlooNetwork& network, const CommunicatorOptions& options) {
  if (g_transport == Transport::Tcp)
    return make_tcp_communicator(group, store, network, options, std::getenv("KOLO_SECRET"));
  return make_gloo_communicator(group, store, network, options);
}

Member join(CommunicatorOptions options = {}, GlooNetwork network = {}) {
  Member m;
  m.store = connect_store();
  GlooGroup group;
  group.rank = env_int("KOLO_RANK");
  group.size = env_int("KOLO_SIZE");
  group.key_prefix = "gloo-test/";
  m.comm = make_communicator(group, *m.store, network, options);
  return m;
}

std::uint64_t fnv1a(const void* data, std::size_t bytes) {
  std::uint64_t h = 1469598103934665603ull;
  const auto* p = static_cast<const std::uint8_t*>(data);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Random inputs, so that float results depend on the reduction order.
Bytes make_input(DataType dtype, std::size_t count, int rank, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  Bytes b(count * element_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DataType::Float32: {
        float v = real(rng);
        std::memcpy(&b[i * 4], &v, 4);
        break;
      }
      case DataType::Float64: {
        double v = real(rng) * 1.0000001;
        std::memcpy(&b[i * 8], &v, 8);
        break;
      }
      case DataType::Float16:
      case DataType::BFloat16: {
        float v = real(rng);
        std::uint16_t h = dtype == DataType::Float16 ? float_to_fp16(v) : float_to_bf16(v);
        std::memcpy(&b[i * 2], &h, 2);
        break;
      }
      case DataType::Bool: b[i] = static_cast<std::uint8_t>(rng() % 3); break;
      default: {
        std::uint64_t v = rng();
        std::memcpy(&b[i * element_size(dtype)], &v, element_size(dtype));
      }
    }
  }
  return b;
}

// What the shared-memory communicator computes: reduce_many over all ranks in rank order.
Bytes reference(DataType dtype, ReduceOp op, std::size_t count, int size, std::uint64_t seed) {
  std::vector<Bytes> inputs;
  std::vector<const void*> ptrs;
  for (int r = 0; r < size; ++r) inputs.push_back(make_input(dtype, count, r, seed));
  for (auto& in : inputs) ptrs.push_back(in.data());
  Bytes out(count * element_size(dtype));
  if (count > 0) reduce_many(out.data(), ptrs.data(), size, count, dtype, op);
  return out;
}

// Every rank holds the same `value` (checked through the communicator itself).
void expect_same_on_every_rank(Communicator& comm, std::uint64_t value, const std::string& what) {
  const int n = comm.size();
  std::vector<std::uint64_t> all(n);
  std::vector<std::size_t> sizes(n, sizeof value);
  comm.allgatherv(&value, sizeof value, all.data(), sizes);
  for (int r = 0; r < n; ++r) EXPECT_EQ(all[r], value) << what << ": rank " << r << " differs";
}

Bytes pattern_bytes(int from, int to, std::size_t n) {
  Bytes b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::uint8_t>(from * 131 + to * 31 + k * 7 + (k >> 9));
  return b;
}

std::string describe(const char* what, DataType dtype, std::size_t count) {
  return std::string(what) + " " + to_string(dtype) + " count=" + std::to_string(count);
}

const std::size_t kCounts[] = {0, 1, 3, 257, 4099, 40961};

void use_transport(Transport t) {
  g_transport = t;
  if (t == Transport::Gloo && !gloo_available()) GTEST_SKIP() << "built with KOLO_WITH_GLOO=OFF";
}

class NetworkSizes : public ::testing::TestWithParam<std::tuple<Transport, int>> {
 protected:
  void SetUp() override { use_transport(std::get<0>(GetParam())); }
  int ranks() const { return std::get<1>(GetParam()); }
};

class NetworkCommunicator : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override { use_transport(GetParam()); }
};

TEST_P(NetworkSizes, AllreduceMatchesRankOrderReductionBitForBit) {
  const int n = ranks();
  testing::run_ranks(n, [](int rank) {
    auto m = join();
    std::uint64_t seed = 1;
    for (DataType dtype : kAllTypes) {
      for (ReduceOp op : kReduceOps) {
        for (std::size_t count : kCounts) {
          ++seed;
          const bool in_place = seed % 2 == 0;
          Bytes in = make_input(dtype, count, rank, seed);
          Bytes out(in.size(), 0xEE);
          m.comm->allreduce(in.data(), in_place ? in.data() : out.data(), count, dtype, op);
          const Bytes& got = in_place ? in : out;
          const auto want = reference(dtype, op, count, m.comm->size(), seed);
          ASSERT_TRUE(got == want) << describe("allreduce", dtype, count) << " " << to_string(op)
                                   << (in_place ? " in place" : "");
          expect_same_on_every_rank(*m.comm, fnv1a(got.data(), got.size()), describe("allreduce", dtype, count));
        }
      }
    }
  }, gloo_options());
}

TEST_P(NetworkSizes, AllreduceLargeBuffersAndDefaultThresholds) {
  const int n = ranks();
  testing::SpawnOptions options;
  options.timeout = 60s;
  testing::run_ranks(n, [](int rank) {
    auto m = join();
    for (std::size_t count : {std::size_t{16384}, std::size_t{(3 << 20) / 4 + 7}}) {
      Bytes in = make_input(DataType::Float32, count, rank, count);
      m.comm->allreduce(in.data(), in.data(), count, DataType::Float32, ReduceOp::Sum);
      ASSERT_TRUE(in == reference(DataType::Float32, ReduceOp::Sum, count, m.comm->size(), count)) << count;
    }
  }, options);
}

TEST_P(NetworkSizes, ReduceScatterUnevenBlocks) {
  const int n = ranks();
  testing::run_ranks(n, [](int rank) {
    auto m = join();
    const int size = m.comm->size();
    std::uint64_t seed = 100;
    for (DataType dtype : {DataType::Float32, DataType::Float16, DataType::Int64, DataType::Bool}) {
      for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{2000}}) {
        ++seed;
        std::vector<std::size_t> counts(size);
        for (int j = 0; j < size; ++j) counts[j] = j == 1 ? 0 : base + static_cast<std::size_t>(j) * 3;
        std::size_t total = 0, before = 0;
        for (int j = 0; j < size; ++j) {
          if (j < rank) before += counts[j];
          total += counts[j];
        }
        const std::size_t es = element_size(dtype);
        Bytes in = make_input(dtype, total, rank, seed);
        Bytes out(counts[rank] * es, 0xEE);
        m.comm->reduce_scatter(in.data(), out.data(), counts, dtype, ReduceOp::Sum);
        auto full = reference(dtype, ReduceOp::Sum, total, size, seed);
        Bytes want(full.begin() + before * es, full.begin() + (before + counts[rank]) * es);
        ASSERT_TRUE(out == want) << describe("reduce_scatter", dtype, total);
        // In place: the output is this rank's block of the input.
        Bytes again = make_input(dtype, total, rank, seed);
        m.comm->reduce_scatter(again.data(), again.data() + before * es, counts, dtype, ReduceOp::Sum);
        ASSERT_TRUE(Bytes(again.begin() + before * es, again.begin() + (before + counts[rank]) * es) == want);
      }
    }
  }, gloo_options());
}

TEST_P(NetworkSizes, AllgathervGathervBroadcastAlltoallv) {
  const int n = ranks();
  testing::run_ranks(n, [](int rank) {
    auto m = join();
    const int size = m.comm->size();
    for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{5000}, std::size_t{300001}}) {
      // allgatherv: rank r contributes base + r bytes (rank 1 none).
      std::vector<std::size_t> sizes(size);
      for (int r = 0; r < size; ++r) sizes[r] = r == 1 ? 0 : base + r;
      Bytes mine = pattern_bytes(rank, 0, sizes[rank]);
      std::size_t total = 0, before = 0;
      for (int r = 0; r < size; ++r) {
        if (r < rank) before += sizes[r];
        total += sizes[r];
      }
      Bytes want;
      for (int r = 0; r < size; ++r) {
        auto part = pattern_bytes(r, 0, sizes[r]);
        want.insert(want.end(), part.begin(), part.end());
      }
      Bytes all(total, 0xEE);
      m.comm->allgatherv(mine.data(), mine.size(), all.data(), sizes);
      ASSERT_TRUE(all == want) << "allgatherv base=" << base;
      Bytes in_place(total, 0xEE);
      std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(before));  // may be empty
      m.comm->allgatherv(in_place.data() + before, mine.size(), in_place.data(), sizes);
      ASSERT_TRUE(in_place == want) << "allgatherv in place base=" << base;

      for (int root = 0; root < size; ++root) {
        Bytes gathered(rank == root ? total : 0, 0xEE);
        m.comm->gatherv(mine.data(), mine.size(), rank == root ? gathered.data() : nullptr, sizes, root);
        if (rank == root) ASSERT_TRUE(gathered == want) << "gatherv root=" << root;

        Bytes buffer = rank == root ? pattern_bytes(root, 9, base) : Bytes(base, 0xEE);
        m.comm->broadcast(buffer.data(), buffer.size(), root);
        ASSERT_TRUE(buffer == pattern_bytes(root, 9, base)) << "broadcast root=" << root << " base=" << base;
      }

      // alltoallv: rank i sends (base + i + 2j) % 7000 bytes to rank j.
      auto bytes_between = [&](int from, int to) { return (base + from + 2 * to) % 7000; };
      std::vector<std::size_t> send_sizes(size), recv_sizes(size);
      Bytes send, expect;
      for (int j = 0; j < size; ++j) {
        send_sizes[j] = bytes_between(rank, j);
        recv_sizes[j] = bytes_between(j, rank);
        auto out = pattern_bytes(rank, j, send_sizes[j]);
        auto in = pattern_bytes(j, rank, recv_sizes[j]);
        send.insert(send.end(), out.begin(), out.end());
        expect.insert(expect.end(), in.begin(), in.end());
      }
      Bytes recv(expect.size(), 0xEE);
      m.comm->alltoallv(send.data(), send_sizes, recv.data(), recv_sizes);
      ASSERT_TRUE(recv == expect) << "alltoallv base=" << base;
    }
  }, gloo_options());
}

TEST_P(NetworkSizes, BarrierWaitsForEveryRank) {
  const int n = ranks();
  testing::run_ranks(n, [](int rank) {
    auto m = join();
    for (int round = 0; round < 3; ++round) {
      // Ranks arrive late by rank x 30 ms; after the barrier every arrival is recorded.
      std::this_thread::sleep_for(std::chrono::milliseconds(30 * rank));
      std::string key = "arrived/" + std::to_string(round) + "/" + std::to_string(rank);
      m.store->set(key, {1});
      m.comm->barrier();
      for (int r = 0; r < m.comm->size(); ++r)
        EXPECT_TRUE(m.store->check({"arrived/" + std::to_string(round) + "/" + std::to_string(r)}))
            << "left the barrier before rank " << r << " arrived";
    }
  }, gloo_options());
}

INSTANTIATE_TEST_SUITE_P(Ranks, NetworkSizes,
                         ::testing::Combine(::testing::Values(Transport::Gloo, Transport::Tcp), ::testing::Values(2, 3, 4)),
                         [](const auto& info) {
                           return std::string(transport_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });
INSTANTIATE_TEST_SUITE_P(Transports, NetworkCommunicator, ::testing::Values(Transport::Gloo, Transport::Tcp),
                         [](const auto& info) { return std::string(transport_name(info.param)); });

TEST_P(NetworkCommunicator, OneRankCopies) {
  testing::run_ranks(1, [](int) {
    auto m = join();
    std::vector<float> in{1, 2, 3}, out(3);
    m.comm->allreduce(in.data(), out.data(), 3, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(out, in);
    m.comm->barrier();
    EXPECT_EQ(m.comm->name(), transport_name(g_transport));
  });
}

TEST_P(NetworkCommunicator, BindsToTheAddressGivenByKoloHostAddr) {
  testing::run_ranks(3, [](int) {
    auto m = join({}, GlooNetwork::from_env(false));
    int value = m.comm->rank() + 1;
    m.comm->allreduce(&value, &value, 1, DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(value, 6);
  }, gloo_options({{"KOLO_HOST_ADDR", "127.0.0.1"}}));
}

TEST_P(NetworkCommunicator, UnusableAddressIsAClearError) {
  testing::run_ranks(2, [](int) {
    auto store = connect_store();
    GlooGroup group;
    group.rank = env_int("KOLO_RANK");
    group.size = 2;
    group.key_prefix = "bad-iface/";
    GlooNetwork network;
    network.iface = "kolo-no-such-if0";
    try {
      make_communicator(group, *store, network, {});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_IFACE=kolo-no-such-if0"), std::string::npos) << e.what();
    }
  });
}

TEST_P(NetworkCommunicator, BadArgumentsLeaveTheCommunicatorUsable) {
  testing::run_ranks(2, [](int) {
    auto m = join();
    std::vector<std::size_t> wrong(3, 1);
    std::vector<float> data(4, 1.0f);
    EXPECT_THROW(m.comm->reduce_scatter(data.data(), data.data(), wrong, DataType::Float32, ReduceOp::Sum),
                 InvalidArgumentError);
    EXPECT_THROW(m.comm->allreduce(data.data(), data.data(), 4, DataType::Float32, ReduceOp::Average),
                 InvalidArgumentError);
    EXPECT_THROW(m.comm->broadcast(data.data(), 4, 7), InvalidArgumentError);
    m.comm->allreduce(data.data(), data.data(), 4, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(data[3], 2.0f);
  });
}

TEST_P(NetworkCommunicator, RankThatNeverComesIsATimeout) {
  testing::run_ranks(2, [](int rank) {
    if (rank == 1) return;  // never joins
    auto store = connect_store();
    CommunicatorOptions options;
    options.connect_timeout = 1s;
    auto start = Clock::now();
    EXPECT_THROW(make_communicator(GlooGroup{0, 2, "never/", {}, {}}, *store, {}, options), TimeoutError);
    EXPECT_LT(Clock::now() - start, 10s);
  });
}

// Ranks that see the failure exit 0; the victim is killed (or exits) on purpose.
void expect_survivors_passed(const std::vector<testing::RankOutcome>& outcomes, int victim) {
  for (const auto& o : outcomes) {
    if (o.rank == victim) continue;
    EXPECT_TRUE(o.exited && o.exit_code == 0) << "rank " << o.rank << " exit " << o.exit_code << " signal "
                                              << o.signal << (o.timed_out ? " (timed out)" : "");
  }
}

// Every survivor gets PeerFailureError naming `victim` within a few seconds, and
// later calls fail the same way at once.
void expect_failure_named(Communicator& comm, int victim, std::size_t count) {
  std::vector<float> data(count, 1.0f);
  auto start = Clock::now();
  try {
    for (int i = 0; i < 1000; ++i) comm.allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
    ADD_FAILURE() << "no error after the peer died";
  } catch (const PeerFailureError& e) {
    EXPECT_EQ(e.peer_rank(), victim) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(victim)), std::string::npos) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 8s);
  EXPECT_THROW(comm.barrier(), PeerFailureError);
}

TEST_P(NetworkCommunicator, KilledPeerIsNamedOnEveryRank) {
  for (std::size_t count : {std::size_t{4}, std::size_t{100000}}) {
    const int victim = 2;
    auto outcomes = testing::spawn_ranks(4, [&](int rank) {
      CommunicatorOptions options;
      options.peer_timeout = 20s;  // detection must come from the closed connection, not a timeout
      auto m = join(options);
      std::vector<float> data(count, 1.0f);
      m.comm->allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
      if (rank == victim) {
        std::this_thread::sleep_for(100ms);
        raise(SIGKILL);
      }
      expect_failure_named(*m.comm, victim, count);
      // Stay alive until every survivor has its error: nobody may learn of the
      // failure from a peer process exiting.
      m.store->add("caught", 1);
      auto start = Clock::now();
      while (m.store->add("caught", 0) < 3 && Clock::now() - start < 15s) std::this_thread::sleep_for(10ms);
    }, gloo_options());
    expect_survivors_passed(outcomes, victim);
  }
}

TEST_P(NetworkCommunicator, StoppedPeerIsNamedAfterThePeerTimeout) {
  const int victim = 1;
  auto outcomes = testing::spawn_ranks(3, [&](int rank) {
    CommunicatorOptions options;
    options.peer_timeout = 1s;
    auto m = join(options);
    m.comm->barrier();
    if (rank == victim) {
      std::string pid = std::to_string(getpid());
      m.store->set("victim-pid", store::Bytes(pid.begin(), pid.end()));
      raise(SIGSTOP);
      _exit(0);  // not reached: rank 0 kills it
    }
    m.store->wait({"victim-pid"}, 5s);
    std::this_thread::sleep_for(100ms);
    expect_failure_named(*m.comm, victim, 3);
    if (rank == 0) {
      auto pid = m.store->get("victim-pid", 1s);
      kill(std::stoi(std::string(pid.begin(), pid.end())), SIGKILL);
    }
  }, gloo_options());
  expect_survivors_passed(outcomes, victim);
}

TEST_P(NetworkCommunicator, AbortFromAnotherThreadWakesTheWaiter) {
  testing::run_ranks(2, [](int rank) {
    auto m = join();
    m.comm->barrier();
    if (rank == 1) {
      // Stays away from the collective until rank 0 is done with it.
      m.store->wait({"aborted"}, 10s);
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      m.comm->abort("test abort");
    });
    auto start = Clock::now();
    std::vector<float> data(1000, 1.0f);
    try {
      m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
      ADD_FAILURE() << "allreduce returned";
    } catch (const ShutdownError& e) {
      EXPECT_NE(std::string(e.what()).find("test abort"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 3s);
    aborter.join();
    EXPECT_THROW(m.comm->barrier(), ShutdownError);
    m.store->set("aborted", {1});
  });
}

}  // namespace
}  // namespace kolo::comm

namespace kolo::comm {
namespace {

// A measurement, not a check: run with --gtest_also_run_disabled_tests
// --gtest_filter='*LoopbackNumbers*'. Prints allreduce latency and bus
// bandwidth (nccl-tests convention: busbw = algbw x 2(n-1)/n) on loopback.
TEST_P(NetworkCommunicator, DISABLED_LoopbackNumbers) {
  for (int n : {2, 4}) {
    testing::SpawnOptions options;
    options.timeout = 300s;
    testing::run_ranks(n, [](int rank) {
      auto m = join();
      const int size = m.comm->size();
      for (std::size_t bytes : {std::size_t{8}, std::size_t{1024}, std::size_t{64 << 10}, std::size_t{1 << 20},
                                std::size_t{16 << 20}, std::size_t{64 << 20}}) {
        std::vector<float> data(bytes / 4, 1.0f);
        const int reps = bytes <= (64 << 10) ? 300 : bytes <= (1 << 20) ? 30 : 5;
        m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        m.comm->barrier();
        auto start = Clock::now();
        for (int i = 0; i < reps; ++i)
          m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / reps;
        if (rank == 0) {
          const double algbw = bytes / seconds / 1e9;
          std::printf("%s allreduce n=%d %9zu B: %9.1f us  algbw %6.3f GB/s  busbw %6.3f GB/s\n",
                      transport_name(g_transport), size, bytes, seconds * 1e6, algbw, algbw * 2 * (size - 1) / size);
        }
      }
    }, options);
  }
}

}  // namespace
}  // namespace kolo::comm
