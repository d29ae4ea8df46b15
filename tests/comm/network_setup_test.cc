// How the two TCP communicators (gloo's transport, and kolo's own sockets) are
// set up from a MeshGroup and a MeshNetwork, on real processes and loopback: the
// address from KOLO_HOST_ADDR, an unusable interface, a rank that never comes.
// Their collectives and failure contract are the communicator suites'
// (communicator_suite_test.cc, communicator_failures_test.cc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "comm/gloo/gloo_communicator.h"
#include "comm/tcp/tcp_communicator.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/netns.h"
#include "harness/subprocess.h"
#include "kolo/error.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

enum class Transport { Gloo, Tcp };

const char* transport_name(Transport t) { return t == Transport::Tcp ? "tcp" : "gloo"; }

int env_int(const char* name) { return std::atoi(std::getenv(name)); }

struct Member {
  std::unique_ptr<store::StoreClient> store;
  std::unique_ptr<Communicator> comm;
};

class NetworkSetup : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    if (GetParam() == Transport::Gloo && !gloo_available()) GTEST_SKIP() << "built with KOLO_WITH_GLOO=OFF";
  }

  std::unique_ptr<MeshCommunicator> make(const MeshGroup& group, store::StoreClient& store, const MeshNetwork& network,
                                         const CommunicatorOptions& options) const {
    if (GetParam() == Transport::Tcp)
      return make_tcp_communicator(group, store, network, options, std::getenv("KOLO_SECRET"));
    return make_gloo_communicator(group, store, network, options);
  }

  Member join(MeshNetwork network = {}) const {
    Member m;
    m.store = testing::connect_job_store();
    m.comm = make(MeshGroup{env_int("KOLO_RANK"), env_int("KOLO_SIZE"), "setup-test/", {}, {}}, *m.store, network, {});
    return m;
  }
};

INSTANTIATE_TEST_SUITE_P(Transports, NetworkSetup, ::testing::Values(Transport::Gloo, Transport::Tcp),
                         [](const auto& info) { return std::string(transport_name(info.param)); });

TEST_P(NetworkSetup, BindsToTheAddressGivenByKoloHostAddr) {
  testing::SpawnOptions options;
  options.env = {{"KOLO_HOST_ADDR", "127.0.0.1"}};
  testing::run_ranks(3, [this](int) {
    auto m = join(MeshNetwork::from_env(false));
    int value = m.comm->rank() + 1;
    m.comm->allreduce(&value, &value, 1, DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(value, 6);
  }, options);
}

TEST_P(NetworkSetup, UnusableAddressIsAClearError) {
  testing::run_ranks(2, [this](int) {
    auto store = testing::connect_job_store();
    MeshNetwork network;
    network.iface = "kolo-no-such-if0";
    try {
      make(MeshGroup{env_int("KOLO_RANK"), 2, "bad-iface/", {}, {}}, *store, network, {});
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_IFACE=kolo-no-such-if0"), std::string::npos) << e.what();
    }
  });
}

TEST_P(NetworkSetup, RankThatNeverComesIsATimeout) {
  testing::run_ranks(2, [this](int rank) {
    if (rank == 1) return;  // never joins
    auto store = testing::connect_job_store();
    CommunicatorOptions options;
    options.connect_timeout = 1s;
    auto start = Clock::now();
    EXPECT_THROW(make(MeshGroup{0, 2, "never/", {}, {}}, *store, {}, options), TimeoutError);
    EXPECT_LT(Clock::now() - start, 10s);
  });
}

// KOLO_IFACE's address: a link-local IPv6 one (fe80::/10) is usable only with a
// scope the peers would not know, so an interface that has nothing else is a
// clear error, and one that has both gives the other. In a network namespace of
// its own, on a veth pair made there with link-local addresses only.
TEST(NetworkInterfaceAddress, LinkLocalAddressesArePassedOver) {
  if (auto why = testing::NetnsHosts::unavailable()) GTEST_SKIP() << *why;
  testing::NetnsOptions options;
  options.hosts = 1;
  options.ipv6 = true;
  testing::NetnsHosts hosts(options);
  auto in_host = [&](const std::string& command) {
    auto argv = hosts.exec_prefix(0);
    argv.insert(argv.end(), {"sh", "-c", command});
    const auto result = testing::run_command(argv);
    EXPECT_EQ(result.exit_code, 0) << command << ": " << result.err;
    return result.out;
  };
  // Without duplicate address detection the link-local addresses are usable,
  // and listed, as soon as the links are up.
  in_host("sysctl -qw net.ipv6.conf.default.accept_dad=0 && ip link add ll0 type veth peer name ll1 && "
          "ip link set ll0 up && ip link set ll1 up");
  const auto deadline = Clock::now() + 5s;
  while (in_host("ip -6 addr show dev ll0 scope link").find("fe80") == std::string::npos && Clock::now() < deadline)
    std::this_thread::sleep_for(20ms);
  ASSERT_NE(in_host("ip -6 addr show dev ll0 scope link").find("fe80"), std::string::npos) << "no link-local address";

  // The namespace is the calling thread's: a thread of its own enters it.
  std::thread inside([&] {
    const int ns = ::open(("/run/netns/" + hosts.name(0)).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(ns, 0);
    ASSERT_EQ(::setns(ns, CLONE_NEWNET), 0);
    ::close(ns);
    MeshNetwork network;
    network.iface = "ll0";
    try {
      const ListenAddress address = listen_address(network);
      ADD_FAILURE() << "ll0 has only a link-local address, and gave " << address.host;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_IFACE=ll0"), std::string::npos) << e.what();
    }
    in_host("ip addr add fd00:232::7/64 dev ll0 nodad");
    EXPECT_EQ(listen_address(network).host, "fd00:232::7");
  });
  inside.join();
}

// A measurement, not a check: run with --gtest_also_run_disabled_tests
// --gtest_filter='*LoopbackNumbers*'. Prints allreduce latency and bus
// bandwidth (nccl-tests convention: busbw = algbw x 2(n-1)/n) on loopback.
TEST_P(NetworkSetup, DISABLED_LoopbackNumbers) {
  for (int n : {2, 4}) {
    testing::SpawnOptions options;
    options.timeout = 300s;
    testing::run_ranks(n, [this](int rank) {
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
                      transport_name(GetParam()), size, bytes, seconds * 1e6, algbw, algbw * 2 * (size - 1) / size);
        }
      }
    }, options);
  }
}

}  // namespace
}  // namespace kolo::comm
