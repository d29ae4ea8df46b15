// The store against peers that do not follow the protocol: random junk, oversized
// and truncated frames, unknown opcodes, idle and half-done handshakes, too many
// connections. After each, the server must still be serving everyone else, and
// must have closed the offending connection (and counted it, where it is an attack
// rather than a disconnect).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <random>
#include <thread>

#include "common/hmac.h"
#include "common/wire.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/store.h"
#include "store/store_protocol.h"

namespace kolo::store {
namespace {

using namespace std::chrono_literals;
namespace proto = protocol;

// A raw TCP connection to the store that speaks the protocol by hand.
class RawConnection {
 public:
  explicit RawConnection(int port) : fd_(net::connect_tcp("127.0.0.1", port, net::deadline_after(2s))) {}

  std::array<std::uint8_t, proto::kNonceSize> read_greeting() {
    std::array<std::uint8_t, proto::kMagic.size() + proto::kNonceSize> greeting;
    net::read_exact(fd_.get(), greeting.data(), greeting.size(), net::deadline_after(2s));
    EXPECT_TRUE(std::equal(proto::kMagic.begin(), proto::kMagic.end(), greeting.begin()));
    std::array<std::uint8_t, proto::kNonceSize> nonce;
    std::copy(greeting.begin() + proto::kMagic.size(), greeting.end(), nonce.begin());
    return nonce;
  }

  void authenticate(const std::string& secret) {
    auto nonce = read_greeting();
    auto mac = crypto::hmac_sha256({reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size()}, nonce);
    send(mac);
    std::uint8_t verdict = 0xff;
    net::read_exact(fd_.get(), &verdict, 1, net::deadline_after(2s));
    ASSERT_EQ(verdict, proto::kHandshakeAccepted);
  }

  void send(std::span<const std::uint8_t> bytes) {
    net::write_all(fd_.get(), bytes.data(), bytes.size(), net::deadline_after(2s));
  }

  // Sends `payload` as one frame.
  void send_frame(const std::vector<std::uint8_t>& payload) {
    wire::Writer w;
    w.put<std::uint32_t>(static_cast<std::uint32_t>(payload.size()));
    send(w.bytes());
    send(payload);
  }

  // Reads one reply frame's payload.
  std::vector<std::uint8_t> read_frame() {
    std::uint32_t length = 0;
    net::read_exact(fd_.get(), &length, 4, net::deadline_after(2s));
    std::vector<std::uint8_t> payload(length);
    net::read_exact(fd_.get(), payload.data(), length, net::deadline_after(2s));
    return payload;
  }

  // True when the server closes the connection within `timeout` (whatever it
  // sent before that is skipped).
  bool closed_by_server_within(std::chrono::milliseconds timeout) {
    const auto deadline = net::deadline_after(timeout);
    std::uint8_t sink[4096];
    for (;;) {
      try {
        net::read_exact(fd_.get(), sink, 1, deadline);
      } catch (const net::SocketError& e) {
        return e.kind() == net::SocketError::Kind::Closed;
      }
    }
  }

  void close() { fd_.reset(); }

 private:
  net::Fd fd_;
};

std::vector<std::uint8_t> request(proto::Opcode op, const std::function<void(wire::Writer&)>& fields = {}) {
  wire::Writer w;
  w.put(op);
  if (fields) fields(w);
  return w.take();
}

class StoreHostileTest : public ::testing::Test {
 protected:
  StoreHostileTest() {
    // Opened before any attack, and checked to still work after it.
    bystander_ = StoreClient::connect("127.0.0.1", port(), secret_, 5s);
    bystander_->set("bystander", {1});
  }

  int port() const { return server_.port(); }

  // The server still serves an existing client and accepts a new one.
  void expect_still_serving() {
    EXPECT_EQ(bystander_->get("bystander", 1s), Bytes{1});
    auto fresh = StoreClient::connect("127.0.0.1", port(), secret_, 5s);
    const std::int64_t after = fresh->add("healthy", 1);
    EXPECT_EQ(bystander_->add("healthy", 0), after);
  }

  std::string secret_ = make_secret();
  StoreServer server_{secret_, "127.0.0.1", 0, StoreServerOptions{.handshake_timeout = 1s, .max_connections = 64}};
  std::unique_ptr<StoreClient> bystander_;
};

TEST_F(StoreHostileTest, RandomJunkInsteadOfHandshake) {
  std::mt19937 rng(42);
  for (int round = 0; round < 5; ++round) {
    RawConnection raw(port());
    std::vector<std::uint8_t> junk(100 + round * 1000);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    raw.send(junk);
    EXPECT_TRUE(raw.closed_by_server_within(2s));
  }
  EXPECT_EQ(server_.rejected_connections(), 5u);
  expect_still_serving();
}

TEST_F(StoreHostileTest, RandomJunkAfterAuthenticating) {
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    RawConnection raw(port());
    raw.authenticate(secret_);
    // A small first byte pair keeps the announced length under the limit in some
    // rounds, so that junk also reaches the request parser.
    std::vector<std::uint8_t> junk(64);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    junk[0] = static_cast<std::uint8_t>(junk.size() - 4);
    junk[1] = junk[2] = junk[3] = 0;
    junk[4] = static_cast<std::uint8_t>(100 + round);  // no such opcode
    raw.send(junk);
    EXPECT_TRUE(raw.closed_by_server_within(2s));
  }
  EXPECT_EQ(server_.rejected_connections(), 5u);
  expect_still_serving();
}

TEST_F(StoreHostileTest, HugeLengthPrefixIsRefusedBeforeAllocating) {
  RawConnection raw(port());
  raw.authenticate(secret_);
  const std::uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
  raw.send(huge);
  EXPECT_TRUE(raw.closed_by_server_within(2s));
  EXPECT_EQ(server_.rejected_connections(), 1u);

  RawConnection just_over(port());
  just_over.authenticate(secret_);
  wire::Writer w;
  w.put<std::uint32_t>(proto::kMaxFrame + 1);
  just_over.send(w.bytes());
  EXPECT_TRUE(just_over.closed_by_server_within(2s));
  EXPECT_EQ(server_.rejected_connections(), 2u);
  expect_still_serving();
}

TEST_F(StoreHostileTest, FieldLengthsAndCountsOverTheirLimitsAreRefused) {
  const std::vector<std::vector<std::uint8_t>> bad_requests = {
      // A key length beyond the key limit.
      request(proto::Opcode::Set, [](wire::Writer& w) { w.put<std::uint32_t>(proto::kMaxKey + 1); }),
      // A key list claiming more keys than allowed.
      request(proto::Opcode::Wait, [](wire::Writer& w) { w.put<std::uint32_t>(proto::kMaxKeysPerRequest + 1); }),
      // A key count the frame cannot hold: must not reserve space for it.
      request(proto::Opcode::Check, [](wire::Writer& w) { w.put<std::uint32_t>(1000); }),
      // A value length larger than the frame.
      request(proto::Opcode::Set,
              [](wire::Writer& w) {
                w.put_string("k");
                w.put<std::uint32_t>(1000);
              }),
      // Trailing bytes after a valid request.
      request(proto::Opcode::Delete,
              [](wire::Writer& w) {
                w.put_string("k");
                w.put<std::uint8_t>(0);
              }),
      // Missing fields.
      request(proto::Opcode::Get, [](wire::Writer& w) { w.put_string("k"); }),
      // An empty frame (no opcode).
      {},
  };
  for (const auto& bad : bad_requests) {
    RawConnection raw(port());
    raw.authenticate(secret_);
    raw.send_frame(bad);
    EXPECT_TRUE(raw.closed_by_server_within(2s));
  }
  EXPECT_EQ(server_.rejected_connections(), bad_requests.size());
  expect_still_serving();
}

TEST_F(StoreHostileTest, TruncatedFrameThenClose) {
  RawConnection raw(port());
  raw.authenticate(secret_);
  wire::Writer w;
  w.put<std::uint32_t>(100);
  w.put(proto::Opcode::Set);
  raw.send(w.bytes());  // 1 of 100 announced bytes
  raw.close();
  // A truncated handshake too.
  RawConnection half(port());
  half.read_greeting();
  const std::uint8_t partial_mac[10] = {};
  half.send(partial_mac);
  half.close();
  expect_still_serving();
}

TEST_F(StoreHostileTest, ConnectThenCloseRepeatedly) {
  for (int i = 0; i < 50; ++i) RawConnection(port()).close();
  expect_still_serving();
  // A disconnect is not an attack.
  EXPECT_EQ(server_.rejected_connections(), 0u);
}

TEST_F(StoreHostileTest, NeverFinishingTheHandshakeIsClosedAtTheTimeout) {
  RawConnection silent(port());
  RawConnection slow(port());
  slow.read_greeting();
  const std::uint8_t some[5] = {1, 2, 3, 4, 5};
  slow.send(some);
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(silent.closed_by_server_within(3s));
  EXPECT_TRUE(slow.closed_by_server_within(3s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 900ms);
  EXPECT_EQ(server_.rejected_connections(), 2u);
  expect_still_serving();
}

TEST_F(StoreHostileTest, ClientThatDisconnectsWhileParkedLeavesNoTrace) {
  {
    RawConnection raw(port());
    raw.authenticate(secret_);
    raw.send_frame(request(proto::Opcode::Get, [](wire::Writer& w) {
      w.put_string("parked");
      w.put<std::uint32_t>(10000);
    }));
    raw.send_frame(request(proto::Opcode::Wait, [](wire::Writer& w) {
      w.put<std::uint32_t>(1);
      w.put_string("parked");
      w.put<std::uint32_t>(10000);
    }));
    std::this_thread::sleep_for(50ms);
  }
  std::this_thread::sleep_for(50ms);
  bystander_->set("parked", {9});
  EXPECT_EQ(bystander_->get("parked", 1s), Bytes{9});
  expect_still_serving();
}

TEST_F(StoreHostileTest, PipelinedRequestsAreAnsweredInOrder) {
  RawConnection raw(port());
  raw.authenticate(secret_);
  // Three frames in one write, the GET parked until the SET after it... arrives
  // on another connection.
  wire::Writer batch;
  for (const auto& payload :
       {request(proto::Opcode::Add,
                [](wire::Writer& w) {
                  w.put_string("p");
                  w.put<std::int64_t>(5);
                }),
        request(proto::Opcode::Get,
                [](wire::Writer& w) {
                  w.put_string("later");
                  w.put<std::uint32_t>(5000);
                }),
        request(proto::Opcode::Check, [](wire::Writer& w) {
          w.put<std::uint32_t>(1);
          w.put_string("later");
        })}) {
    batch.put<std::uint32_t>(static_cast<std::uint32_t>(payload.size()));
    for (auto b : payload) batch.put(b);
  }
  raw.send(batch.bytes());
  auto add_reply = raw.read_frame();
  ASSERT_EQ(add_reply.size(), 9u);
  EXPECT_EQ(add_reply[0], static_cast<std::uint8_t>(proto::Status::Ok));
  EXPECT_EQ(add_reply[1], 5);
  std::this_thread::sleep_for(50ms);
  bystander_->set("later", {4, 2});
  auto get_reply = raw.read_frame();
  EXPECT_EQ(get_reply, (std::vector<std::uint8_t>{0, 2, 0, 0, 0, 4, 2}));
  auto check_reply = raw.read_frame();
  EXPECT_EQ(check_reply, (std::vector<std::uint8_t>{0, 1}));
  EXPECT_EQ(server_.rejected_connections(), 0u);
}

TEST_F(StoreHostileTest, ConnectionsBeyondTheLimitAreClosedAtOnce) {
  // The bystander holds one of the 64 slots.
  std::vector<std::unique_ptr<RawConnection>> holders;
  for (int i = 0; i < 63; ++i) {
    holders.push_back(std::make_unique<RawConnection>(port()));
    holders.back()->authenticate(secret_);
  }
  RawConnection extra(port());
  EXPECT_TRUE(extra.closed_by_server_within(2s));
  EXPECT_EQ(server_.rejected_connections(), 1u);
  EXPECT_EQ(bystander_->get("bystander", 1s), Bytes{1});
  holders.clear();
  std::this_thread::sleep_for(100ms);  // let the server see the closes
  expect_still_serving();
}

// Anyone on the host can open connections to the store without the secret. Idle
// ones used to fill it, so that a late rank was closed at once (no retry) while
// rank 0 waited out the start timeout, and every refusal was a warning line.
TEST(StoreFlood, IdleUnauthenticatedConnectionsCannotKeepARankOut) {
  const std::string secret = make_secret();
  StoreServer server(secret, "127.0.0.1", 0, StoreServerOptions{.handshake_timeout = 20s, .max_connections = 256});
  ::testing::internal::CaptureStderr();
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<RawConnection>(server.port()));
  std::this_thread::sleep_for(200ms);  // let the server take them all
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<StoreClient> rank;
  EXPECT_NO_THROW(rank = StoreClient::connect("127.0.0.1", server.port(), secret, 10s));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  if (rank) EXPECT_EQ(rank->add("ranks", 1), 1);
  idle.clear();
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_LE(std::count(warnings.begin(), warnings.end(), '\n'), 3) << warnings;
  EXPECT_GE(server.rejected_connections(), 300u - 128u);
}

// A store that closes the handshake (it is full) is tried again until the
// timeout, instead of failing the rank at once.
TEST(StoreFlood, ClientRetriesAFullStoreUntilItHasRoom) {
  const std::string secret = make_secret();
  StoreServer server(secret, "127.0.0.1", 0, StoreServerOptions{.max_connections = 2});
  auto first = std::make_unique<RawConnection>(server.port());
  first->authenticate(secret);
  RawConnection second(server.port());
  second.authenticate(secret);
  std::thread leaver([&] {
    std::this_thread::sleep_for(500ms);
    first->close();
  });
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<StoreClient> late;
  EXPECT_NO_THROW(late = StoreClient::connect("127.0.0.1", server.port(), secret, 10s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 400ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  leaver.join();
  if (late) EXPECT_EQ(late->add("late", 1), 1);
  // With no room until the timeout (second and late hold both), it fails then.
  EXPECT_THROW(StoreClient::connect("127.0.0.1", server.port(), secret, 600ms), PeerFailureError);
}

TEST_F(StoreHostileTest, GarbageFromManyPeersAtOnce) {
  std::vector<std::thread> attackers;
  for (int t = 0; t < 8; ++t) {
    attackers.emplace_back([this, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 10; ++i) {
        RawConnection raw(port());
        std::vector<std::uint8_t> junk(rng() % 300 + 1);
        for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
        try {
          raw.send(junk);
        } catch (const net::SocketError&) {
          // The server may close before all junk arrives.
        }
      }
    });
  }
  for (int i = 0; i < 50; ++i) bystander_->add("busy", 1);
  for (auto& t : attackers) t.join();
  EXPECT_EQ(bystander_->add("busy", 0), 50);
  expect_still_serving();
}

// A hand-written server that greets like a store (or not) and then misbehaves, to
// check the client's side of the protocol.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int fd)> behaviour)
      : listener_(net::listen_tcp("127.0.0.1", 0, 4)), port_(net::local_port(listener_.get())) {
    thread_ = std::thread([this, behaviour] {
      pollfd pfd{listener_.get(), POLLIN, 0};
      if (::poll(&pfd, 1, 5000) != 1) return;
      net::Fd conn(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn.valid()) return;
      try {
        behaviour(conn.get());
      } catch (const net::SocketError&) {
      }
    });
  }
  ~FakeServer() { thread_.join(); }
  int port() const { return port_; }

 private:
  net::Fd listener_;
  int port_;
  std::thread thread_;
};

void greet_and_accept(int fd, const std::string& secret) {
  std::array<std::uint8_t, 40> greeting{};
  std::copy(proto::kMagic.begin(), proto::kMagic.end(), greeting.begin());
  net::write_all(fd, greeting.data(), greeting.size(), net::deadline_after(2s));
  std::array<std::uint8_t, 32> mac;
  net::read_exact(fd, mac.data(), mac.size(), net::deadline_after(2s));
  std::array<std::uint8_t, 32> nonce{};
  EXPECT_EQ(mac, crypto::hmac_sha256({reinterpret_cast<const std::uint8_t*>(secret.data()), secret.size()}, nonce));
  const std::uint8_t ok = proto::kHandshakeAccepted;
  net::write_all(fd, &ok, 1, net::deadline_after(2s));
}

TEST(StoreClientHostile, SomethingElseOnThePortIsNotAStore) {
  FakeServer fake([](int fd) {
    const std::string http = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    net::write_all(fd, http.data(), http.size(), net::deadline_after(2s));
  });
  try {
    StoreClient::connect("127.0.0.1", fake.port(), "secret", 2s);
    FAIL() << "connected to something that is not a store";
  } catch (const PeerFailureError& e) {
    EXPECT_NE(std::string(e.what()).find("not a kolo store"), std::string::npos) << e.what();
  }
}

TEST(StoreClientHostile, HugeReplyLengthIsAPeerFailureNotAnAllocation) {
  FakeServer fake([](int fd) {
    greet_and_accept(fd, "secret");
    std::uint8_t request[64];
    ::recv(fd, request, sizeof(request), 0);
    const std::uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    net::write_all(fd, huge, sizeof(huge), net::deadline_after(2s));
    std::this_thread::sleep_for(200ms);
  });
  auto client = StoreClient::connect("127.0.0.1", fake.port(), "secret", 2s);
  EXPECT_THROW(client->add("n", 1), PeerFailureError);
  EXPECT_THROW(client->add("n", 1), PeerFailureError);  // and stays failed
}

TEST(StoreClientHostile, MalformedReplyIsAPeerFailure) {
  FakeServer fake([](int fd) {
    greet_and_accept(fd, "secret");
    std::uint8_t request[64];
    ::recv(fd, request, sizeof(request), 0);
    // An Ok reply to ADD that lacks its 8-byte result.
    const std::uint8_t reply[] = {2, 0, 0, 0, 0, 1};
    net::write_all(fd, reply, sizeof(reply), net::deadline_after(2s));
    std::this_thread::sleep_for(200ms);
  });
  auto client = StoreClient::connect("127.0.0.1", fake.port(), "secret", 2s);
  EXPECT_THROW(client->add("n", 1), PeerFailureError);
}

TEST(StoreClientHostile, SilentServerTimesOutTheHandshake) {
  FakeServer fake([](int fd) {
    std::uint8_t byte;
    net::read_exact(fd, &byte, 1, net::deadline_after(5s));  // until the client gives up and closes
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(StoreClient::connect("127.0.0.1", fake.port(), "secret", 300ms), PeerFailureError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

}  // namespace
}  // namespace kolo::store
