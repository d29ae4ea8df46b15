// A rank's TCP port against strangers who open connections and say nothing: the
// mesh must form beside them without blaming a rank, however many they open and
// however few descriptors the rank may hold, and a rank out of descriptors must
// wait, not spin. Real processes, loopback only.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp/tcp_connect.h"
#include "comm/tcp/tcp_handshake.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/tcp_job.h"
#include "harness/time_bound.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/store.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::size_t open_descriptors() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/fd"),
                                                std::filesystem::directory_iterator()));
}

// This process may hold at most `limit` descriptors from now on.
void limit_descriptors(rlim_t limit) {
  ASSERT_LT(open_descriptors(), limit / 2);
  rlimit r{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
  r.rlim_cur = limit;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &r), 0) << std::strerror(errno);
}

// `count` connections to host:port that never speak; those the port does not
// take within 5 s are left out.
std::vector<net::Fd> idle_connections(const std::string& host, int port, int count) {
  std::vector<net::Fd> idle;
  for (int i = 0; i < count; ++i) {
    try {
      idle.push_back(net::connect_tcp(host, port, net::deadline_after(5s)));
    } catch (const net::SocketError&) {
    }
  }
  return idle;
}

// True when the other end has closed `fd` (what it sent before is read and dropped).
bool closed_by_peer(int fd) {
  std::uint8_t bytes[64];
  for (;;) {
    const ssize_t n = ::recv(fd, bytes, sizeof bytes, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Rank 0 may hold 40 descriptors; rank 1 opens 150 idle connections to its port,
// then joins. Rank 0 filled up with strangers and spun until their handshakes
// timed out, 5 s per batch, so that rank 1's handshake timed out behind them
// and rank 1 failed, naming rank 0.
// Sanitizer runtimes need descriptors of their own (UBSan checks a vtable by
// reading memory through a pipe): out of them, they report errors that are not.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

TEST(TcpFlood, IdleStrangersUnderALowDescriptorLimitCannotKeepARankOut) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's runtime runs out of descriptors first";
  attack_then_join([](const std::string& host, int port) { return idle_connections(host, port, 150); },
                   [] { limit_descriptors(40); });
}

// 300 idle connections to rank 0's port: beyond 128 the oldest are closed at
// once instead of each being held until its handshake times out.
TEST(TcpFlood, AtMost128ConnectionsAuthenticateAtOnce) {
  attack_then_join([](const std::string& host, int port) {
    auto idle = idle_connections(host, port, 300);
    EXPECT_EQ(idle.size(), 300u);
    std::size_t closed = 0;
    const auto deadline = Clock::now() + 2s;  // well before the 5 s handshake timeout
    while (closed < 300 - 128 && Clock::now() < deadline) {
      std::this_thread::sleep_for(50ms);
      closed = 0;
      for (const auto& fd : idle) closed += closed_by_peer(fd.get()) ? 1 : 0;
    }
    EXPECT_GE(closed, 300u - 128u);
    return idle;
  });
}

// Rank 0 runs out of descriptors (a thread takes every one left) while rank 1's
// connection waits on its port. Rank 0 polled the port, failed to accept it and
// polled again at once: a core's worth of CPU until descriptors were free.
TEST(TcpFlood, OutOfDescriptorsTheAcceptLoopWaitsInsteadOfSpinning) {
  if (kSanitized) GTEST_SKIP() << "a sanitizer's runtime runs out of descriptors first";
  run_ranks(2, [](int rank) {
    auto store = connect_job_store();
    if (rank == 1) {
      store->wait({"full"}, 20s);
      auto comm = join_tcp(*store, 1, 2);
      expect_sum_works(*comm);
      return;
    }
    auto own = connect_job_store();  // the thread's
    limit_descriptors(64);
    std::thread hog([&] {
      tcp_address_of(*own, 0);  // rank 0 listens
      std::vector<net::Fd> held;
      for (int fd; (fd = ::dup(2)) >= 0;) held.emplace_back(fd);
      EXPECT_EQ(errno, EMFILE);
      own->set("full", {1});
      std::this_thread::sleep_for(300ms);  // rank 1's connection is waiting by now
      const double before = cpu_seconds();
      std::this_thread::sleep_for(1s);
      EXPECT_LT(cpu_seconds() - before, 0.1) << "the accept loop spun";
    });
    auto comm = join_tcp(*store, 0, 2);
    hog.join();
    expect_sum_works(*comm);
  });
}

// A rank whose handshake is cut (the listening rank closed it to make room)
// connects again instead of failing and naming the other. Rank 0 here is the
// test: it closes rank 1's first connection unanswered, the second after its
// challenge, and completes the third.
TEST(TcpFlood, ARankWhoseHandshakeIsCutConnectsAgain) {
  run_ranks(2, [](int rank) {
    auto store = connect_job_store();
    comm::MeshGroup group;
    group.rank = rank;
    group.size = 2;
    group.key_prefix = kTcpPrefix;
    const comm::tcp::HandshakeKeys keys{std::getenv("KOLO_SECRET"), kTcpPrefix};
    if (rank == 1) {
      comm::tcp::MeshSetup setup;
      setup.group = &group;
      setup.keys = keys;
      setup.connect_timeout = 20s;
      std::vector<net::Fd> fds;
      EXPECT_NO_THROW(fds = comm::tcp::connect_mesh(setup, *store, {}));
      if (!fds.empty()) EXPECT_TRUE(fds[0].valid());
      store->set("done", {1});
      return;
    }
    net::Fd listener = net::listen_tcp("127.0.0.1", 0, 4);
    const std::string address = "127.0.0.1:" + std::to_string(net::local_port(listener.get()));
    store->set(std::string(kTcpPrefix) + "tcp/addr/0", store::Bytes(address.begin(), address.end()));
    auto next = [&] {
      pollfd p{listener.get(), POLLIN, 0};
      EXPECT_EQ(::poll(&p, 1, 10000), 1);
      return net::Fd(::accept(listener.get(), nullptr, nullptr));
    };
    next().reset();
    const comm::tcp::Nonce challenge = comm::tcp::random_nonce();
    const auto message = comm::tcp::challenge_message(challenge);
    {
      net::Fd second = next();
      net::write_all(second.get(), message.data(), message.size(), net::deadline_after(5s));
    }
    net::Fd third = next();
    net::write_all(third.get(), message.data(), message.size(), net::deadline_after(5s));
    std::array<std::uint8_t, comm::tcp::kHelloBytes> hello;
    net::read_exact(third.get(), hello.data(), hello.size(), net::deadline_after(5s));
    const auto verdict = comm::tcp::check_hello(keys, hello, challenge, 0);
    ASSERT_EQ(verdict.refusal, "");
    const auto welcome = comm::tcp::welcome_message(keys, challenge, verdict.initiator_nonce, 1, 0);
    net::write_all(third.get(), welcome.data(), welcome.size(), net::deadline_after(5s));
    store->wait({"done"}, 20s);
  });
}

}  // namespace
}  // namespace kolo::testing
