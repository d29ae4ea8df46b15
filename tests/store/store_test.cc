// The rendezvous store over real loopback sockets: commands, blocking, concurrency
// across threads and forked processes, authentication and shutdown. Hostile input
// is in store_hostile_test.cc.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/multiprocess.h"
#include "harness/time_bound.h"
#include "kolo/error.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "store/store_table.h"

namespace kolo::store {
namespace {

using namespace std::chrono_literals;
using kolo::testing::time_bound;
using Clock = std::chrono::steady_clock;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

// Clients in forked processes, forked before the server's thread exists.
//
// A fork while another thread holds a lock hands the child a lock nobody will
// release. GCC 12's ASan allocator takes no lock around fork(): a child forked
// while the server thread was allocating deadlocked partway through its adds (seen
// in CI; see also harness/multiprocess.cc). So each child is forked while the test
// is single-threaded, waits on a pipe for the port of the server started after it,
// and exits 0 if its body returned, 1 if it threw.
class ForkedClients {
 public:
  using Body = std::function<void(int port)>;
  ~ForkedClients() {
    for (auto& child : children_) {
      if (child.port_fd >= 0) ::close(child.port_fd);
      if (child.pid > 0 && waitpid(child.pid, nullptr, WNOHANG) == 0) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, nullptr, 0);
      }
    }
  }

  pid_t fork_client(const Body& body) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const pid_t pid = fork();
    if (pid == 0) {
      // Only the parent may hold a write end: then a parent that dies before it
      // publishes gives every child EOF instead of a wait forever.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(fds[1]);
      for (const auto& earlier : children_) ::close(earlier.port_fd);
      int port = 0;
      int code = 1;
      if (::read(fds[0], &port, sizeof port) == static_cast<ssize_t>(sizeof port)) {
        try {
          body(port);
          code = 0;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "child failed: %s\n", e.what());
        }
      }
      _exit(code);
    }
    ::close(fds[0]);
    children_.push_back({pid, fds[1]});
    return pid;
  }

  // Starts every child on the server at `port`.
  void publish(int port) {
    for (auto& child : children_) {
      if (::write(child.port_fd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) {
        throw std::runtime_error("a forked client is gone before it started");
      }
      ::close(child.port_fd);
      child.port_fd = -1;
    }
  }

 private:
  struct Child {
    pid_t pid;
    int port_fd;
  };
  std::vector<Child> children_;
};

// The exit status of a child, or -1 if it is still running after `timeout` (then
// it is killed) or died of a signal.
int wait_child(pid_t pid, milliseconds timeout = 30s) {
  const auto deadline = Clock::now() + time_bound(timeout);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

class StoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<StoreClient> connect() { return connect_with(secret_); }
  std::unique_ptr<StoreClient> connect_with(const std::string& secret) {
    return StoreClient::connect("127.0.0.1", server_->port(), secret, 5s);
  }

  std::string secret_ = make_secret();
  std::unique_ptr<StoreServer> server_ = std::make_unique<StoreServer>(secret_);
};

TEST_F(StoreTest, SetThenGetAndOverwrite) {
  auto client = connect();
  client->set("alpha", bytes_of("one"));
  EXPECT_EQ(client->get("alpha", 1s), bytes_of("one"));
  client->set("alpha", bytes_of("two"));
  EXPECT_EQ(client->get("alpha", 1s), bytes_of("two"));
  client->set("empty", {});
  EXPECT_EQ(client->get("empty", 1s), Bytes{});
}

TEST_F(StoreTest, ValuesAreSharedBetweenClients) {
  auto writer = connect();
  auto reader = connect();
  Bytes binary = {0, 1, 2, 255, 0, 128};
  writer->set("binary", binary);
  EXPECT_EQ(reader->get("binary", 1s), binary);
}

TEST_F(StoreTest, GetBlocksUntilAnotherThreadSets) {
  auto reader = connect();
  auto writer = connect();
  std::thread setter([&] {
    std::this_thread::sleep_for(200ms);
    writer->set("late", bytes_of("here"));
  });
  auto start = Clock::now();
  EXPECT_EQ(reader->get("late", 5s), bytes_of("here"));
  EXPECT_GE(since(start), 150ms);
  EXPECT_LT(since(start), time_bound(3s));
  setter.join();
}

TEST(StoreForked, GetBlocksUntilAnotherProcessSets) {
  const std::string secret = make_secret();
  ForkedClients forked;
  const pid_t child = forked.fork_client([&](int port) {
    std::this_thread::sleep_for(200ms);
    StoreClient::connect("127.0.0.1", port, secret, 5s)->set("from-child", bytes_of("hello"));
  });
  StoreServer server(secret);
  forked.publish(server.port());
  auto reader = StoreClient::connect("127.0.0.1", server.port(), secret, 5s);
  EXPECT_EQ(reader->get("from-child", 5s), bytes_of("hello"));
  EXPECT_EQ(wait_child(child), 0);
}

TEST_F(StoreTest, GetTimesOutWithTimeoutErrorAndClientStaysUsable) {
  auto client = connect();
  auto start = Clock::now();
  EXPECT_THROW(client->get("never", 200ms), TimeoutError);
  EXPECT_GE(since(start), 190ms);
  EXPECT_LT(since(start), time_bound(2s));
  EXPECT_THROW(client->get("never", 0ms), TimeoutError);
  client->set("after", bytes_of("ok"));
  EXPECT_EQ(client->get("after", 0ms), bytes_of("ok"));
  EXPECT_EQ(client->get("after", milliseconds::max()), bytes_of("ok"));
  client->wait({"after"}, milliseconds::max());
  EXPECT_THROW(client->get("never", -5ms), TimeoutError);
}

TEST_F(StoreTest, OneSetWakesEveryParkedGet) {
  constexpr int kWaiters = 32;
  std::vector<std::unique_ptr<StoreClient>> clients;
  for (int i = 0; i < kWaiters; ++i) clients.push_back(connect());
  std::atomic<int> woken{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      if (clients[i]->get("go", 5s) == bytes_of("now")) woken.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(100ms);
  connect()->set("go", bytes_of("now"));
  for (auto& t : threads) t.join();
  EXPECT_EQ(woken.load(), kWaiters);
}

TEST_F(StoreTest, AddStartsAtZeroAndStoresLittleEndianInt64) {
  auto client = connect();
  EXPECT_EQ(client->add("counter", 5), 5);
  EXPECT_EQ(client->add("counter", -7), -2);
  EXPECT_EQ(client->add("counter", 0), -2);
  Bytes raw = client->get("counter", 1s);
  ASSERT_EQ(raw.size(), 8u);
  std::int64_t decoded = 0;
  std::memcpy(&decoded, raw.data(), 8);
  EXPECT_EQ(decoded, -2);
  // A value set as 8 little-endian bytes is a counter too.
  std::int64_t forty = 40;
  Bytes encoded(8);
  std::memcpy(encoded.data(), &forty, 8);
  client->set("preset", encoded);
  EXPECT_EQ(client->add("preset", 2), 42);
}

TEST_F(StoreTest, AddWrapsInsteadOfOverflowing) {
  auto client = connect();
  client->add("big", INT64_MAX);
  EXPECT_EQ(client->add("big", 1), INT64_MIN);
}

TEST_F(StoreTest, AddOnNonIntegerValueIsAnErrorAndConnectionSurvives) {
  auto client = connect();
  client->set("text", bytes_of("not a number"));
  EXPECT_THROW(client->add("text", 1), InvalidArgumentError);
  EXPECT_EQ(client->get("text", 1s), bytes_of("not a number"));
  EXPECT_EQ(client->add("fine", 3), 3);
}

TEST_F(StoreTest, AddFromManyThreadsSumsExactly) {
  constexpr int kThreads = 8, kAdds = 250;
  auto shared = connect();  // half the threads share one client: calls are serialized
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::unique_ptr<StoreClient> own = t % 2 ? connect() : nullptr;
      StoreClient& client = own ? *own : *shared;
      for (int i = 0; i < kAdds; ++i) client.add("sum", t + 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared->add("sum", 0), std::int64_t{kAdds} * (kThreads * (kThreads + 1) / 2));
}

TEST(StoreForked, AddFromForkedProcessesSumsExactly) {
  constexpr int kProcesses = 4, kAdds = 250;
  const std::string secret = make_secret();
  ForkedClients forked;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    children.push_back(forked.fork_client([&, p](int port) {
      auto client = StoreClient::connect("127.0.0.1", port, secret, 5s);
      for (int i = 0; i < kAdds; ++i) client->add("sum", p + 1);
      client->add("done", 1);
    }));
  }
  StoreServer server(secret);
  forked.publish(server.port());
  auto client = StoreClient::connect("127.0.0.1", server.port(), secret, 5s);
  for (pid_t child : children) EXPECT_EQ(wait_child(child), 0);
  EXPECT_EQ(client->add("done", 0), kProcesses);
  EXPECT_EQ(client->add("sum", 0), std::int64_t{kAdds} * (1 + 2 + 3 + 4));
}

TEST_F(StoreTest, CheckAndWait) {
  auto client = connect();
  auto writer = connect();
  EXPECT_TRUE(client->check({}));
  EXPECT_FALSE(client->check({"a", "b"}));
  EXPECT_THROW(client->wait({"a", "b"}, 100ms), TimeoutError);
  client->wait({}, 100ms);  // nothing to wait for

  std::thread setter([&] {
    writer->set("b", bytes_of("2"));
    std::this_thread::sleep_for(100ms);
    writer->set("c", bytes_of("3"));
    std::this_thread::sleep_for(100ms);
    writer->set("a", bytes_of("1"));
  });
  auto start = Clock::now();
  client->wait({"a", "b", "c"}, 5s);
  EXPECT_GE(since(start), 150ms);
  EXPECT_TRUE(client->check({"a", "b", "c"}));
  EXPECT_FALSE(client->check({"a", "b", "c", "d"}));
  setter.join();
}

TEST_F(StoreTest, WaitSeesKeysErasedWhileItWaits) {
  auto client = connect();
  auto writer = connect();
  writer->set("first", bytes_of("x"));
  std::thread changer([&] {
    std::this_thread::sleep_for(100ms);
    writer->erase("first");
    writer->set("second", bytes_of("y"));
  });
  // "first" existed when the wait began but is gone when "second" appears.
  EXPECT_THROW(client->wait({"first", "second"}, 500ms), TimeoutError);
  changer.join();
  writer->set("first", bytes_of("again"));
  client->wait({"first", "second"}, 1s);
}

TEST_F(StoreTest, EraseRemovesKey) {
  auto client = connect();
  client->set("gone", bytes_of("soon"));
  EXPECT_TRUE(client->check({"gone"}));
  client->erase("gone");
  EXPECT_FALSE(client->check({"gone"}));
  EXPECT_THROW(client->get("gone", 50ms), TimeoutError);
  client->erase("gone");  // erasing a missing key is fine
  EXPECT_EQ(client->add("gone", 1), 1);
}

TEST_F(StoreTest, KeyAndValueLimitsAreInvalidArguments) {
  auto client = connect();
  const std::string long_key(protocol::kMaxKey + 1, 'k');
  EXPECT_THROW(client->set(long_key, {}), InvalidArgumentError);
  EXPECT_THROW(client->get(long_key, 1s), InvalidArgumentError);
  EXPECT_THROW(client->add(long_key, 1), InvalidArgumentError);
  EXPECT_THROW(client->check({"ok", long_key}), InvalidArgumentError);
  EXPECT_THROW(client->erase(long_key), InvalidArgumentError);
  EXPECT_THROW(client->wait(std::vector<std::string>(protocol::kMaxKeysPerRequest + 1, "k"), 1s),
               InvalidArgumentError);
  EXPECT_THROW(client->set("big", Bytes(protocol::kMaxValue + 1)), InvalidArgumentError);

  // Exactly at the limits works.
  const std::string max_key(protocol::kMaxKey, 'k');
  Bytes max_value(protocol::kMaxValue);
  for (std::size_t i = 0; i < max_value.size(); i += 4096) max_value[i] = static_cast<std::uint8_t>(i >> 12);
  client->set(max_key, max_value);
  EXPECT_EQ(client->get(max_key, 5s), max_value);
  EXPECT_TRUE(client->check(std::vector<std::string>(protocol::kMaxKeysPerRequest, max_key)));
}

TEST_F(StoreTest, WrongSecretIsRefusedCountedAndServerKeepsServing) {
  auto good = connect();
  good->set("before", bytes_of("1"));
  try {
    connect_with(make_secret());
    FAIL() << "a wrong secret was accepted";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("refused the job secret"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_->rejected_connections(), 1u);
  EXPECT_EQ(good->get("before", 1s), bytes_of("1"));
  EXPECT_EQ(connect()->add("after", 1), 1);
}

TEST_F(StoreTest, ServerDestroyedWhileClientWaitsGivesPeerFailurePromptly) {
  auto client = connect();
  std::thread destroyer([&] {
    std::this_thread::sleep_for(200ms);
    server_.reset();
  });
  auto start = Clock::now();
  try {
    client->get("never", 30s);
    FAIL() << "get returned after the server was destroyed";
  } catch (const PeerFailureError& e) {
    EXPECT_EQ(e.peer_rank(), -1);
    EXPECT_NE(std::string(e.what()).find("closed the connection"), std::string::npos) << e.what();
  }
  EXPECT_LT(since(start), time_bound(2s));
  destroyer.join();
  // Every later call fails the same way, at once.
  EXPECT_THROW(client->set("x", {}), PeerFailureError);
}

TEST(StoreForked, ServerDestroyedWhileForkedClientWaits) {
  const std::string secret = make_secret();
  ForkedClients forked;
  const pid_t child = forked.fork_client([&](int port) {
    auto client = StoreClient::connect("127.0.0.1", port, secret, 5s);
    client->set("child-ready", {});
    try {
      client->get("never", 30s);
    } catch (const PeerFailureError&) {
      _exit(0);
    }
    _exit(3);
  });
  auto server = std::make_unique<StoreServer>(secret);
  forked.publish(server->port());
  StoreClient::connect("127.0.0.1", server->port(), secret, 5s)->get("child-ready", 5s);
  std::this_thread::sleep_for(100ms);
  auto start = Clock::now();
  server.reset();
  EXPECT_EQ(wait_child(child, 5s), 0);
  EXPECT_LT(since(start), time_bound(2s));
}

TEST_F(StoreTest, ServerDestructionIsPromptWithClientsConnected) {
  auto a = connect();
  auto b = connect();
  std::thread waiter([&] { EXPECT_THROW(a->wait({"never"}, 30s), PeerFailureError); });
  std::this_thread::sleep_for(50ms);
  auto start = Clock::now();
  server_.reset();
  EXPECT_LT(since(start), time_bound(1s));
  waiter.join();
}

TEST(StoreConnect, RetriesUntilTheServerListens) {
  int port;
  {
    StoreServer probe(make_secret());  // find a port that is free right now
    port = probe.port();
  }
  const std::string secret = make_secret();
  std::unique_ptr<StoreServer> server;
  std::thread starter([&] {
    std::this_thread::sleep_for(300ms);
    server = std::make_unique<StoreServer>(secret, "127.0.0.1", port);
  });
  auto client = StoreClient::connect("127.0.0.1", port, secret, 5s);
  starter.join();
  EXPECT_EQ(client->add("n", 1), 1);
}

TEST(StoreConnect, UnreachableServerIsPeerFailureAfterTheTimeout) {
  int port;
  {
    StoreServer probe(make_secret());
    port = probe.port();
  }
  auto start = Clock::now();
  EXPECT_THROW(StoreClient::connect("127.0.0.1", port, make_secret(), 300ms), PeerFailureError);
  EXPECT_GE(since(start), 250ms);
  EXPECT_LT(since(start), time_bound(2s));
}

TEST(StoreConnect, EmptySecretIsRejectedUpFront) {
  EXPECT_THROW(StoreServer(""), InvalidArgumentError);
  StoreServer server(make_secret());
  EXPECT_THROW(StoreClient::connect("127.0.0.1", server.port(), "", 1s), InvalidArgumentError);
}

TEST(StoreSecret, IsHexFromTheKernelAndFreshEachTime) {
  std::string a = make_secret(), b = make_secret();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

testing::SpawnOptions quick_job() {
  testing::SpawnOptions options;
  options.timeout = std::chrono::seconds(20);
  return options;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Ranks find the store from the environment kolorun sets, so the secret never
// appears in any process's command line.
TEST(StoreSecret, RanksConnectFromTheEnvironmentNotTheCommandLine) {
  testing::run_ranks(3, [](int rank) {
    const char* secret = std::getenv("KOLO_SECRET");
    ASSERT_NE(secret, nullptr);
    EXPECT_EQ(read_file("/proc/self/cmdline").find(secret), std::string::npos);
    auto client = StoreClient::connect_from_env(5s);
    client->set("rank" + std::to_string(rank), {});
    client->wait({"rank0", "rank1", "rank2"}, 5s);
  }, quick_job());
}

TEST(StoreAddress, ParsesHostAndPort) {
  auto a = parse_store_address("127.0.0.1:29500");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 29500);
  auto b = parse_store_address("[::1]:65535");
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.port, 65535);
  EXPECT_EQ(parse_store_address("node-3:1").host, "node-3");
  for (const char* bad : {"", "host", "host:", ":80", "host:0", "host:65536", "host:12a", "host:-1", "host:1K",
                          "[::1:80", "host:99999999999"}) {
    EXPECT_THROW(parse_store_address(bad), InvalidArgumentError) << bad;
  }
}

TEST(StoreAddress, ConnectFromEnvNeedsBothVariables) {
  testing::run_ranks(1, [](int) {
    const std::string addr = std::getenv("KOLO_STORE_ADDR");
    unsetenv("KOLO_SECRET");
    EXPECT_THROW(StoreClient::connect_from_env(1s), InvalidArgumentError);
    setenv("KOLO_SECRET", "wrong", 1);
    EXPECT_THROW(StoreClient::connect_from_env(1s), InvalidArgumentError);
    unsetenv("KOLO_STORE_ADDR");
    EXPECT_THROW(StoreClient::connect_from_env(1s), InvalidArgumentError);
  }, quick_job());
}

// The store's bookkeeping of parked requests, without sockets.
TEST(StoreTable, ParkedRequestsAreWokenOnlyWhenAllKeysExistAndForgottenAfter) {
  StoreTable table;
  EXPECT_FALSE(table.park(1, {}));  // nothing missing: not parked
  EXPECT_TRUE(table.park(1, {"a", "b"}));
  EXPECT_TRUE(table.park(2, {"b"}));
  EXPECT_TRUE(table.park(3, {"c"}));
  EXPECT_EQ(table.parked_count(), 3u);
  EXPECT_TRUE(table.set("a", {}).empty());
  auto woken = table.set("b", {});
  std::sort(woken.begin(), woken.end());
  EXPECT_EQ(woken, (std::vector<StoreTable::WaiterId>{1, 2}));
  table.unpark(3);
  EXPECT_EQ(table.parked_count(), 0u);
  EXPECT_TRUE(table.set("c", {}).empty());
}

TEST(StoreTable, AddRefusesValuesThatAreNotEightBytes) {
  StoreTable table;
  std::vector<StoreTable::WaiterId> woken;
  table.set("s", {1, 2, 3});
  EXPECT_FALSE(table.add("s", 1, woken).has_value());
  EXPECT_EQ(*table.find("s"), (StoreTable::Bytes{1, 2, 3}));
  EXPECT_TRUE(table.park(7, {"n"}));
  EXPECT_EQ(table.add("n", 2, woken), 2);
  EXPECT_EQ(woken, std::vector<StoreTable::WaiterId>{7});
}

}  // namespace
}  // namespace kolo::store
