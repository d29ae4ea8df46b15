// The hierarchical communicator and the communicator choice, with hosts simulated
// on this machine: each rank is told (KOLO_LOCAL_*/KOLO_CROSS_*) that it runs on
// one of several hosts, so the shm part joins the ranks of a "host" and the TCP
// part joins the hosts over loopback. Checks which communicator each layout and
// setting gets, every collective bit for bit against the hierarchical reduction
// order and across ranks, a killed rank named by every survivor, and the public
// API on fake hosts.
#include "comm/hierarchical/hierarchical_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/communicator_choice.h"
#include "bootstrap/topology.h"
#include "common/half.h"
#include "common/reduce.h"
#include "harness/multiprocess.h"
#include "harness/values.h"
#include "kolo/error.h"
#include "kolo/kolo.h"
#include "store/store.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<std::uint8_t>;
using Clock = std::chrono::steady_clock;

// In a rank: pretend to be local rank rank % per_host on host rank / per_host.
void place_on_fake_host(int rank, int per_host, int hosts) {
  setenv("KOLO_LOCAL_RANK", std::to_string(rank % per_host).c_str(), 1);
  setenv("KOLO_LOCAL_SIZE", std::to_string(per_host).c_str(), 1);
  setenv("KOLO_CROSS_RANK", std::to_string(rank / per_host).c_str(), 1);
  setenv("KOLO_CROSS_SIZE", std::to_string(hosts).c_str(), 1);
}

struct Member {
  Topology topology;
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<Communicator> comm;
};

Member join(int generation = 0) {
  Member m;
  m.topology = topology_from_env();
  auto addr = m.topology.store_addr;
  auto colon = addr.rfind(':');
  m.store = store::StoreClient::connect(addr.substr(0, colon), std::stoi(addr.substr(colon + 1)), m.topology.secret, 10s);
  m.comm = make_communicator(m.topology, generation, m.store.get());
  return m;
}

testing::SpawnOptions options(std::map<std::string, std::string> env = {}) {
  testing::SpawnOptions o;
  o.timeout = 90s;
  o.env = std::move(env);
  // Small thresholds: modest sizes take every path of the parts.
  // Fake hosts share loopback (the launcher sets KOLO_HOST_ADDR for real hosts).
  o.env.emplace("KOLO_HOST_ADDR", "127.0.0.1");
  o.env.emplace("KOLO_GLOO_SMALL_BYTES", "1024");
  o.env.emplace("KOLO_GLOO_ROUND_BYTES", "4096");
  o.env.emplace("KOLO_TCP_SMALL_BYTES", "1024");
  o.env.emplace("KOLO_TCP_ROUND_BYTES", "4096");
  o.env.emplace("KOLO_SHM_SMALL_BYTES", "1024");
  o.env.emplace("KOLO_SHM_SLOT_BYTES", "16384");
  return o;
}

class CommunicatorChoice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gloo_available()) GTEST_SKIP() << "built with KOLO_WITH_GLOO=OFF";
  }
};
using HierarchicalCommunicator = CommunicatorChoice;

std::string chosen(int ranks, int per_host, std::map<std::string, std::string> env) {
  // Each rank writes the name it got; rank 0's is returned (all must agree).
  std::string name;
  auto outcomes = testing::spawn_ranks(ranks, [&](int rank) {
    place_on_fake_host(rank, per_host, ranks / per_host);
    std::string mine;
    try {
      auto m = join();
      mine = m.comm->name();
      m.comm->barrier();  // nobody leaves while a peer still connects
    } catch (const InvalidArgumentError& e) {
      mine = "error";
      std::printf("rank %d: %s\n", rank, e.what());
    }
    _exit(mine == "hierarchical" ? 10 : mine == "gloo" ? 11 : mine == "shm" ? 12 : mine == "error" ? 13
           : mine == "tcp"        ? 15
                                  : 14);
  }, options(std::move(env)));
  std::set<int> codes;
  for (const auto& o : outcomes) codes.insert(o.exit_code);
  if (codes.size() != 1) return "ranks disagree";
  switch (*codes.begin()) {
    case 10: return "hierarchical";
    case 11: return "gloo";
    case 12: return "shm";
    case 13: return "error";
    case 15: return "tcp";
  }
  return "?";
}

TEST_F(CommunicatorChoice, DependsOnHostsAndSettings) {
  EXPECT_EQ(chosen(4, 2, {}), "hierarchical");
  EXPECT_EQ(chosen(4, 2, {{"KOLO_HIERARCHICAL", "0"}}), "tcp");
  EXPECT_EQ(chosen(4, 2, {{"KOLO_BACKEND", "gloo"}}), "gloo");
  EXPECT_EQ(chosen(4, 2, {{"KOLO_BACKEND", "shm"}}), "error");
  EXPECT_EQ(chosen(3, 3, {}), "shm");
  EXPECT_EQ(chosen(3, 3, {{"KOLO_HIERARCHICAL", "1"}}), "hierarchical");
  EXPECT_EQ(chosen(3, 3, {{"KOLO_BACKEND", "gloo"}}), "gloo");
  EXPECT_EQ(chosen(3, 3, {{"KOLO_BACKEND", "tcp"}}), "tcp");
  EXPECT_EQ(chosen(4, 2, {{"KOLO_BACKEND", "tcp"}}), "tcp");
  EXPECT_EQ(chosen(4, 2, {{"KOLO_BACKEND", "tcp"}, {"KOLO_HIERARCHICAL", "1"}}), "hierarchical");
  EXPECT_EQ(chosen(3, 3, {{"KOLO_BACKEND", "bogus"}}), "error");
  EXPECT_EQ(chosen(2, 1, {}), "hierarchical");  // one rank per host: the local part is trivial
}

// Host 0 runs ranks 0 and 1, host 1 runs rank 2: hierarchical cannot split that.
void place_uneven(int rank) {
  setenv("KOLO_LOCAL_RANK", std::to_string(rank == 2 ? 0 : rank).c_str(), 1);
  setenv("KOLO_LOCAL_SIZE", rank == 2 ? "1" : "2", 1);
  setenv("KOLO_CROSS_RANK", rank == 2 ? "1" : "0", 1);
  setenv("KOLO_CROSS_SIZE", "2", 1);
}

TEST_F(CommunicatorChoice, UnevenHostsFallBackToFlatTcpOrFailWhenForced) {
  testing::run_ranks(3, [](int rank) {
    place_uneven(rank);
    auto m = join();
    EXPECT_EQ(m.comm->name(), "tcp");
    int value = rank;
    m.comm->allreduce(&value, &value, 1, DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(value, 3);
  }, options());
  testing::run_ranks(3, [](int rank) {
    place_uneven(rank);
    setenv("KOLO_HIERARCHICAL", "1", 1);
    EXPECT_THROW(join(), InvalidArgumentError);
  }, options());
}

// Random inputs so that float results depend on the reduction order.
Bytes make_input(DataType dtype, std::size_t count, int rank, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + static_cast<std::uint64_t>(rank));
  std::uniform_real_distribution<float> real(-2.0f, 2.0f);
  Bytes b(count * element_size(dtype));
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype == DataType::Float32) {
      float v = real(rng);
      std::memcpy(&b[i * 4], &v, 4);
    } else if (dtype == DataType::Float16 || dtype == DataType::BFloat16) {
      float v = real(rng);
      std::uint16_t h = dtype == DataType::Float16 ? float_to_fp16(v) : float_to_bf16(v);
      std::memcpy(&b[i * 2], &h, 2);
    } else if (dtype == DataType::Bool) {
      b[i] = static_cast<std::uint8_t>(rng() % 3);
    } else {
      std::uint64_t v = rng();
      std::memcpy(&b[i * element_size(dtype)], &v, element_size(dtype));
    }
  }
  return b;
}

// Hierarchical order: each host reduces its ranks in local order, then the hosts
// are reduced in host order.
Bytes reference(DataType dtype, ReduceOp op, std::size_t count, int per_host, int hosts, std::uint64_t seed) {
  const std::size_t bytes = count * element_size(dtype);
  std::vector<Bytes> host_results;
  for (int h = 0; h < hosts; ++h) {
    std::vector<Bytes> inputs;
    std::vector<const void*> ptrs;
    for (int l = 0; l < per_host; ++l) inputs.push_back(make_input(dtype, count, h * per_host + l, seed));
    for (auto& in : inputs) ptrs.push_back(in.data());
    Bytes out(bytes);
    if (count > 0) reduce_many(out.data(), ptrs.data(), per_host, count, dtype, op);
    host_results.push_back(std::move(out));
  }
  std::vector<const void*> ptrs;
  for (auto& r : host_results) ptrs.push_back(r.data());
  Bytes out(bytes);
  if (count > 0) reduce_many(out.data(), ptrs.data(), hosts, count, dtype, op);
  return out;
}

std::uint64_t hash(const Bytes& b) { return testing::fnv1a(b.data(), b.size()); }

void expect_same_on_every_rank(Communicator& comm, std::uint64_t value, const std::string& what) {
  std::vector<std::uint64_t> all(comm.size());
  std::vector<std::size_t> sizes(comm.size(), sizeof value);
  comm.allgatherv(&value, sizeof value, all.data(), sizes);
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(all[r], value) << what << ": rank " << r << " differs";
}

Bytes pattern_bytes(int from, int to, std::size_t n) {
  Bytes b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::uint8_t>(from * 131 + to * 31 + k * 7 + (k >> 9));
  return b;
}

// KOLO_BACKEND=gloo with KOLO_HIERARCHICAL=1: gloo's transport joins the hosts
// (by default kolo's own sockets do).
const std::map<std::string, std::string> kOverGloo{{"KOLO_BACKEND", "gloo"}, {"KOLO_HIERARCHICAL", "1"}};

void check_every_collective(int per_host, int hosts, std::map<std::string, std::string> env = {}) {
  testing::run_ranks(per_host * hosts, [=](int rank) {
    place_on_fake_host(rank, per_host, hosts);
    auto m = join();
    ASSERT_EQ(m.comm->name(), "hierarchical");
    Communicator& comm = *m.comm;
    const int n = comm.size();
    std::uint64_t seed = 1;
    for (DataType dtype : {DataType::Float32, DataType::Float16, DataType::BFloat16, DataType::Int32,
                           DataType::UInt8, DataType::Bool}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1001},
                                  std::size_t{50001}}) {
          ++seed;
          Bytes data = make_input(dtype, count, rank, seed);
          comm.allreduce(data.data(), data.data(), count, dtype, op);
          auto what = std::string("allreduce ") + to_string(dtype) + " " + to_string(op) + " " + std::to_string(count);
          ASSERT_TRUE(data == reference(dtype, op, count, per_host, hosts, seed)) << what;
          expect_same_on_every_rank(comm, hash(data), what);
        }
      }
    }
    for (std::size_t base : {std::size_t{0}, std::size_t{1}, std::size_t{7777}, std::size_t{200003}}) {
      std::vector<std::size_t> sizes(n);
      for (int r = 0; r < n; ++r) sizes[r] = r == 1 ? 0 : base + r;
      Bytes want;
      for (int r = 0; r < n; ++r) {
        auto part = pattern_bytes(r, 0, sizes[r]);
        want.insert(want.end(), part.begin(), part.end());
      }
      auto mine = pattern_bytes(rank, 0, sizes[rank]);
      Bytes all(want.size(), 0xEE);
      comm.allgatherv(mine.data(), mine.size(), all.data(), sizes);
      ASSERT_TRUE(all == want) << "allgatherv " << base;
      for (int root = 0; root < n; ++root) {
        Bytes buffer = rank == root ? pattern_bytes(root, 5, base) : Bytes(base, 0xEE);
        comm.broadcast(buffer.data(), buffer.size(), root);
        ASSERT_TRUE(buffer == pattern_bytes(root, 5, base)) << "broadcast root " << root << " " << base;
      }
      Bytes gathered(rank == 0 ? want.size() : 0);
      comm.gatherv(mine.data(), mine.size(), rank == 0 ? gathered.data() : nullptr, sizes, 0);
      if (rank == 0) ASSERT_TRUE(gathered == want) << "gatherv";
      comm.barrier();
    }
    // reduce_scatter and alltoallv go through the flat TCP communicator.
    std::vector<std::size_t> counts(n, 5);
    Bytes in = make_input(DataType::Int32, 5 * n, rank, 99);
    Bytes out(5 * 4);
    comm.reduce_scatter(in.data(), out.data(), counts, DataType::Int32, ReduceOp::Sum);
    std::vector<Bytes> inputs;
    std::vector<const void*> ptrs;
    for (int r = 0; r < n; ++r) inputs.push_back(make_input(DataType::Int32, 5 * n, r, 99));
    for (auto& i : inputs) ptrs.push_back(i.data());
    Bytes full(5 * n * 4);
    reduce_many(full.data(), ptrs.data(), n, 5 * n, DataType::Int32, ReduceOp::Sum);
    EXPECT_TRUE(out == Bytes(full.begin() + rank * 20, full.begin() + rank * 20 + 20)) << "reduce_scatter";
    std::vector<std::size_t> a2a(n, 3);
    Bytes send, expect;
    for (int j = 0; j < n; ++j) {
      auto o = pattern_bytes(rank, j, 3), i = pattern_bytes(j, rank, 3);
      send.insert(send.end(), o.begin(), o.end());
      expect.insert(expect.end(), i.begin(), i.end());
    }
    Bytes recv(expect.size());
    comm.alltoallv(send.data(), a2a, recv.data(), a2a);
    EXPECT_TRUE(recv == expect) << "alltoallv";
  }, options(std::move(env)));
}

TEST_F(HierarchicalCommunicator, TwoHostsOfTwo) { check_every_collective(2, 2); }
TEST_F(HierarchicalCommunicator, ThreeHostsOfTwo) { check_every_collective(2, 3); }
TEST_F(HierarchicalCommunicator, TwoHostsOfOne) { check_every_collective(1, 2); }
TEST_F(HierarchicalCommunicator, TwoHostsOfTwoOverGloo) { check_every_collective(2, 2, kOverGloo); }
TEST_F(HierarchicalCommunicator, ThreeHostsOfTwoOverGloo) { check_every_collective(2, 3, kOverGloo); }
TEST_F(HierarchicalCommunicator, OneHostOfThreeWhenForced) {
  setenv("KOLO_HIERARCHICAL", "1", 1);
  check_every_collective(3, 1);
  unsetenv("KOLO_HIERARCHICAL");
}

void expect_killed_rank_named(std::map<std::string, std::string> env) {
  const int victim = 3;
  auto outcomes = testing::spawn_ranks(4, [&](int rank) {
    place_on_fake_host(rank, 2, 2);
    setenv("KOLO_PEER_TIMEOUT", "20", 1);  // detection must not come from a timeout
    auto m = join();
    std::vector<float> data(5000, 1.0f);
    m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
    if (rank == victim) {
      std::this_thread::sleep_for(100ms);
      raise(SIGKILL);
    }
    auto start = Clock::now();
    try {
      for (int i = 0; i < 10000; ++i)
        m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
      ADD_FAILURE() << "no error";
    } catch (const PeerFailureError& e) {
      EXPECT_EQ(e.peer_rank(), victim) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 8s);
    EXPECT_THROW(m.comm->barrier(), PeerFailureError);
    // Stay alive (as a rank's engine does) until every survivor has its error, so
    // that nobody learns of the failure from a peer process exiting.
    m.store->add("caught", 1);
    while (m.store->add("caught", 0) < 3 && Clock::now() - start < 15s) std::this_thread::sleep_for(10ms);
  }, options(std::move(env)));
  for (const auto& o : outcomes) {
    if (o.rank != victim) EXPECT_TRUE(o.exited && o.exit_code == 0) << "rank " << o.rank << " exit " << o.exit_code;
  }
}

TEST_F(HierarchicalCommunicator, KilledRankIsNamedOnEveryRank) { expect_killed_rank_named({}); }
TEST_F(HierarchicalCommunicator, KilledRankIsNamedOnEveryRankOverGloo) { expect_killed_rank_named(kOverGloo); }

TEST_F(HierarchicalCommunicator, PublicApiOnFakeHosts) {
  testing::run_ranks(4, [](int rank) {
    place_on_fake_host(rank, 2, 2);
    kolo::init();
    EXPECT_EQ(kolo::local_rank(), rank % 2);
    EXPECT_EQ(kolo::cross_size(), 2);
    std::vector<float> grads(100003, static_cast<float>(rank + 1));
    kolo::allreduce(kolo::make_tensor(grads.data(), static_cast<std::int64_t>(grads.size())),
                    {.op = ReduceOp::Average, .name = "grads"});
    for (float g : grads) ASSERT_EQ(g, 2.5f);
    std::int32_t mine[2] = {rank, rank * 10};
    Buffer all = kolo::allgather(kolo::make_tensor(mine, 2), {.name = "ids"});
    for (int r = 0; r < 4; ++r) EXPECT_EQ(all.as<std::int32_t>()[2 * r + 1], r * 10);
    std::int64_t seed = rank == 3 ? 42 : 0;
    kolo::broadcast(kolo::make_tensor(&seed, 1), 3, {.name = "seed"});
    EXPECT_EQ(seed, 42);
    kolo::barrier();
    kolo::shutdown();
  }, options());
}

}  // namespace
}  // namespace kolo::comm

namespace kolo::comm {
namespace {

// A measurement, not a check: --gtest_also_run_disabled_tests
// --gtest_filter='*HierarchicalVsFlatNumbers*'. 4 ranks as 2 fake hosts x 2;
// "network" is loopback here, so this shows the cost of the composition, not the
// saving of cross-host traffic.
TEST_F(HierarchicalCommunicator, DISABLED_HierarchicalVsFlatNumbers) {
  for (const char* hierarchical : {"1", "0"}) {
    testing::SpawnOptions o;
    o.timeout = 300s;
    o.env = {{"KOLO_HOST_ADDR", "127.0.0.1"}, {"KOLO_HIERARCHICAL", hierarchical}};
    testing::run_ranks(4, [](int rank) {
      place_on_fake_host(rank, 2, 2);
      auto m = join();
      for (std::size_t bytes : {std::size_t{8}, std::size_t{64 << 10}, std::size_t{1 << 20}, std::size_t{16 << 20}}) {
        std::vector<float> data(bytes / 4, 1.0f);
        const int reps = bytes <= (64 << 10) ? 200 : bytes <= (1 << 20) ? 20 : 4;
        m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        m.comm->barrier();
        auto start = Clock::now();
        for (int i = 0; i < reps; ++i)
          m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        const double us = std::chrono::duration<double, std::micro>(Clock::now() - start).count() / reps;
        if (rank == 0) std::printf("%-12s allreduce %9zu B: %10.1f us\n", m.comm->name().c_str(), bytes, us);
      }
    }, o);
  }
}

}  // namespace
}  // namespace kolo::comm
