// Which TCP congestion control kolo's own connections run: cubic between ranks
// of one host while each has a core (nothing to pace there, and BBR's pacing on
// loopback often halves a 1 MiB allreduce), the host's default between hosts and
// for more ranks than cores, and the one KOLO_TCP_CONGESTION names on every
// connection. The same count of a host's ranks against its cores decides
// whether a waiting rank yields its core. Real processes, real sockets;
// "another host" is a network namespace (harness/netns.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/tcp/tcp_connect.h"
#include "comm/tcp/tcp_mesh.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/netns.h"
#include "kolo/error.h"
#include "net/socket.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;

std::string congestion_of(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "(getsockopt failed)";
  return name;
}

std::string host_default() {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, 1);
  net::Fd fd = net::connect_tcp("127.0.0.1", net::local_port(listener.get()), net::deadline_after(5s));
  return congestion_of(fd.get());
}

// The two ends of one connection: `client` made in the current network namespace.
struct Pair {
  net::Fd client, server;
};

Pair connect_pair(const net::Fd& listener, const std::string& host) {
  Pair p;
  p.client = net::connect_tcp(host, net::local_port(listener.get()), net::deadline_after(5s));
  pollfd waiting{listener.get(), POLLIN, 0};
  if (::poll(&waiting, 1, 5000) == 1) p.server = net::Fd(::accept(listener.get(), nullptr, nullptr));
  return p;
}

// A connection set up by tcp::connect_mesh between 2 ranks on this host, with
// `setting` as KOLO_TCP_CONGESTION and `cores` as the host's: the congestion
// control of each rank's socket.
std::string mesh_congestion(int rank, const std::string& prefix, const std::string& setting, int cores = 2) {
  auto store = testing::connect_job_store();
  MeshGroup group;
  group.rank = rank;
  group.size = 2;
  group.key_prefix = prefix;
  tcp::MeshSetup setup;
  setup.group = &group;
  setup.keys = tcp::HandshakeKeys{std::getenv("KOLO_SECRET"), prefix};
  setup.connect_timeout = 20s;
  setup.congestion_control = setting;
  setup.cores = cores;
  auto fds = tcp::connect_mesh(setup, *store, {});
  return congestion_of(fds[1 - rank].get());
}

TEST(TcpCongestion, PeersOnThisHostAreLocalWhateverTheAddress) {
  net::Fd listener = net::listen_tcp("127.0.0.1", 0, 4);
  Pair loopback = connect_pair(listener, "127.0.0.1");
  ASSERT_TRUE(loopback.server.valid());
  EXPECT_TRUE(net::peer_is_local(loopback.client.get()));
  EXPECT_TRUE(net::peer_is_local(loopback.server.get()));
  EXPECT_FALSE(net::peer_is_local(-1));
}

// Inside namespace host 0: a connection to its own interface's address is local;
// one to host 1 (its listener made inside host 1) is not, at either end.
TEST(TcpCongestion, APeerInAnotherNetworkNamespaceIsNotLocal) {
  if (auto why = testing::NetnsHosts::unavailable()) GTEST_SKIP() << *why;
  testing::NetnsHosts hosts({.hosts = 2});
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto enter = [&](int i) {
      const int ns = ::open(("/var/run/netns/" + hosts.name(i)).c_str(), O_RDONLY | O_CLOEXEC);
      return ns >= 0 && ::setns(ns, CLONE_NEWNET) == 0 && ::close(ns) == 0;
    };
    int failures = 0;
    try {
      if (!enter(1)) ::_exit(100);
      net::Fd far = net::listen_tcp(hosts.address(1), 0, 4);
      if (!enter(0)) ::_exit(101);
      net::Fd near = net::listen_tcp(hosts.address(0), 0, 4);
      Pair own = connect_pair(near, hosts.address(0));
      Pair across = connect_pair(far, hosts.address(1));
      if (!own.server.valid() || !across.server.valid()) ::_exit(102);
      failures += !net::peer_is_local(own.client.get());
      failures += !net::peer_is_local(own.server.get());
      failures += net::peer_is_local(across.client.get());
      failures += net::peer_is_local(across.server.get());
    } catch (...) {
      ::_exit(103);
    }
    ::_exit(failures);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "wrong answers (100 to 103: setup failed)";
}

TEST(TcpCongestion, RanksOfOneHostConnectWithCubic) {
  if (host_default() == "cubic") GTEST_LOG_(INFO) << "the host's default is cubic already: nothing to tell apart";
  testing::run_ranks(2, [](int rank) { EXPECT_EQ(mesh_congestion(rank, "tcp-cc-local/", ""), "cubic"); });
}

TEST(TcpCongestion, RanksThatOutnumberTheCoresKeepTheHostsDefault) {
  const std::string expected = host_default();
  testing::run_ranks(2, [&](int rank) { EXPECT_EQ(mesh_congestion(rank, "tcp-cc-crowded/", "", 1), expected); });
}

TEST(TcpCongestion, ASettingAppliesToEveryConnection) {
  testing::run_ranks(2, [](int rank) { EXPECT_EQ(mesh_congestion(rank, "tcp-cc-set/", "reno"), "reno"); });
}

TEST(TcpCongestion, ANameTheKernelRefusesFailsClearly) {
  testing::run_ranks(2, [](int rank) {
    try {
      mesh_congestion(rank, "tcp-cc-bad/", "no-such-algorithm");
      ADD_FAILURE() << "an unknown congestion control was taken";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("KOLO_TCP_CONGESTION: 'no-such-algorithm'"), std::string::npos) << e.what();
      // The host's default is always among the allowed (which may lack cubic).
      EXPECT_NE(std::string(e.what()).find(host_default()), std::string::npos) << "names what is allowed: " << e.what();
    }
  });
}

TEST(TcpCongestion, RanksOfOneHostCountAgainstItsCores) {
  testing::run_ranks(2, [](int rank) {
    auto store = testing::connect_job_store();
    MeshGroup group;
    group.rank = rank;
    group.size = 2;
    group.key_prefix = "tcp-crowding/";
    tcp::MeshSetup setup;
    setup.group = &group;
    setup.keys = tcp::HandshakeKeys{std::getenv("KOLO_SECRET"), group.key_prefix};
    setup.connect_timeout = 20s;
    const auto fds = tcp::connect_mesh(setup, *store, {});
    EXPECT_FALSE(tcp::host_ranks_outnumber_cores(fds, 2));
    EXPECT_TRUE(tcp::host_ranks_outnumber_cores(fds, 1));
    std::vector<net::Fd> alone(2);
    EXPECT_FALSE(tcp::host_ranks_outnumber_cores(alone, 1)) << "a rank without peers on its host";
  });
}

// Beside a busy process a yield hands it the core for the rest of its time slice
// (milliseconds): a rank with a core of its own keeps polling without one
// (unless the application computes beside it); ranks that outnumber the cores
// always yield, as the peer they wait for may need theirs.
void expect_yield_when_outnumbering_cores(int ranks) {
  const bool crowded = ranks > static_cast<int>(std::thread::hardware_concurrency());
  testing::run_ranks(ranks, [&](int rank) {
    auto store = testing::connect_job_store();
    MeshGroup group;
    group.rank = rank;
    group.size = ranks;
    group.key_prefix = "tcp-yield-" + std::to_string(ranks) + "/";
    CommunicatorOptions options;
    options.connect_timeout = 20s;
    tcp::Mesh mesh(group, *store, MeshNetwork{}, options, std::getenv("KOLO_SECRET"));
    EXPECT_EQ(mesh.ranks_share_cores(), crowded) << ranks << " ranks on "
                                                     << std::thread::hardware_concurrency() << " cores";
  });
}

TEST(TcpCongestion, AWaitYieldsOnlyWhereTheHostsRanksOutnumberItsCores) {
  expect_yield_when_outnumbering_cores(2);
  expect_yield_when_outnumbering_cores(static_cast<int>(std::thread::hardware_concurrency()) + 1);
}

}  // namespace
}  // namespace kolo::comm
