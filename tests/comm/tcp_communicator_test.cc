// kolo's own TCP communicator where it differs from the others (the shared
// suites are communicator_suite_test.cc and communicator_failures_test.cc): its
// authenticated handshake against strangers, wrong secrets, replayed and garbled handshakes, with the job going on; its
// frames against a peer that breaks them; and blocks of their own length in
// the negotiation step. Real processes, real loopback sockets.
#include "comm/tcp/tcp_communicator.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/tcp/tcp_handshake.h"
#include "comm/tcp/tcp_mesh.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/tcp_job.h"
#include "kolo/error.h"
#include "net/socket.h"
#include "store/store.h"

namespace kolo::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using testing::connect_job_store;

using testing::expect_sum_works;
using testing::join_tcp;
using testing::tcp_address_of;

constexpr const char* kPrefix = testing::kTcpPrefix;

std::array<std::uint8_t, tcp::kChallengeBytes> read_challenge(int fd) {
  std::array<std::uint8_t, tcp::kChallengeBytes> c;
  net::read_exact(fd, c.data(), c.size(), net::deadline_after(5s));
  return c;
}

// True when the other end closes (or resets) the connection without sending a byte.
bool closed_without_reply(int fd) {
  std::uint8_t byte;
  const auto deadline = net::deadline_after(10s);
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      ssize_t n = ::recv(fd, &byte, 1, 0);
      return n <= 0;
    }
    if (Clock::now() > deadline) return false;
  }
}

void send_bytes(int fd, const void* data, std::size_t n) {
  try {
    net::write_all(fd, data, n, net::deadline_after(5s));
  } catch (const net::SocketError&) {
    // The rank may close on us part way through a large write: that is a refusal too.
  }
}

// Rank 1 attacks rank 0 while rank 0 forms the mesh, then joins for real.
TEST(TcpHandshake, StrangersWrongSecretsReplaysAndGarbageAreRefusedWhileTheMeshForms) {
  testing::attack_then_join([](const std::string& host, int port) {
    const tcp::HandshakeKeys right{std::getenv("KOLO_SECRET"), kPrefix};
    const tcp::HandshakeKeys wrong{"not the job's secret", kPrefix};
    const tcp::HandshakeKeys other_group{std::getenv("KOLO_SECRET"), "another-group/"};
    // A stranger that says nothing stays connected through the whole test: the
    // mesh must form beside it.
    net::Fd silent = net::connect_tcp(host, port, net::deadline_after(5s));

    {  // garbage
      net::Fd fd = net::connect_tcp(host, port, net::deadline_after(5s));
      read_challenge(fd.get());
      std::vector<std::uint8_t> junk(tcp::kHelloBytes, 0x5a);
      send_bytes(fd.get(), junk.data(), junk.size());
      EXPECT_TRUE(closed_without_reply(fd.get())) << "garbage";
    }
    {  // an oversized frame: the rank reads a handshake's worth and closes
      net::Fd fd = net::connect_tcp(host, port, net::deadline_after(5s));
      read_challenge(fd.get());
      std::vector<std::uint8_t> junk(4 << 20, 0xa5);
      send_bytes(fd.get(), junk.data(), junk.size());
      EXPECT_TRUE(closed_without_reply(fd.get())) << "oversized";
    }
    for (const auto* keys : {&wrong, &other_group}) {
      net::Fd fd = net::connect_tcp(host, port, net::deadline_after(5s));
      const auto challenge = read_challenge(fd.get());
      tcp::Nonce nonce;
      const auto hello = tcp::hello_message(*keys, challenge, 1, 0, &nonce);
      send_bytes(fd.get(), hello.data(), hello.size());
      EXPECT_TRUE(closed_without_reply(fd.get())) << (keys == &wrong ? "wrong secret" : "another group");
    }
    {  // a valid Hello for one connection's challenge, replayed on another
      net::Fd first = net::connect_tcp(host, port, net::deadline_after(5s));
      const auto challenge = read_challenge(first.get());
      tcp::Nonce nonce;
      const auto hello = tcp::hello_message(right, challenge, 1, 0, &nonce);
      net::Fd second = net::connect_tcp(host, port, net::deadline_after(5s));
      read_challenge(second.get());
      send_bytes(second.get(), hello.data(), hello.size());
      EXPECT_TRUE(closed_without_reply(second.get())) << "replayed";
      first.reset();  // never sent: the rank drops it
    }
    {  // claims to be a rank that never connects to rank 0 this way
      net::Fd fd = net::connect_tcp(host, port, net::deadline_after(5s));
      const auto challenge = read_challenge(fd.get());
      tcp::Nonce nonce;
      const auto hello = tcp::hello_message(right, challenge, 5, 0, &nonce);
      send_bytes(fd.get(), hello.data(), hello.size());
      EXPECT_TRUE(closed_without_reply(fd.get())) << "out-of-range rank";
    }
    std::vector<net::Fd> held;
    held.push_back(std::move(silent));
    return held;
  });
}

TEST(TcpHandshake, TheListeningSocketClosesOnceTheMeshIsComplete) {
  testing::run_ranks(2, [](int rank) {
    auto store = connect_job_store();
    auto comm = join_tcp(*store, rank, 2);
    expect_sum_works(*comm);
    const auto [host, port] = tcp_address_of(*store, 0);
    if (rank == 1) EXPECT_THROW(net::connect_tcp(host, port, net::deadline_after(2s)), net::SocketError);
    expect_sum_works(*comm);
  });
}

TEST(TcpHandshake, ARankWhosePeerCannotProveTheSecretFails) {
  // Rank 1 listens as rank 0 would but answers with the wrong secret's welcome.
  testing::run_ranks(2, [](int rank) {
    auto store = connect_job_store();
    if (rank == 0) {
      net::Fd listener = net::listen_tcp("127.0.0.1", 0, 4);
      const std::string address = "127.0.0.1:" + std::to_string(net::local_port(listener.get()));
      store->set(std::string(kPrefix) + "tcp/addr/0", store::Bytes(address.begin(), address.end()));
      pollfd p{listener.get(), POLLIN, 0};
      ASSERT_GT(::poll(&p, 1, 10000), 0);
      net::Fd fd(::accept(listener.get(), nullptr, nullptr));
      const tcp::Nonce challenge = tcp::random_nonce();
      const auto message = tcp::challenge_message(challenge);
      net::write_all(fd.get(), message.data(), message.size(), net::deadline_after(5s));
      std::array<std::uint8_t, tcp::kHelloBytes> hello;
      net::read_exact(fd.get(), hello.data(), hello.size(), net::deadline_after(5s));
      const tcp::HandshakeKeys wrong{"impostor", kPrefix};
      tcp::Nonce theirs;
      std::memcpy(theirs.data(), hello.data() + 16, theirs.size());
      const auto welcome = tcp::welcome_message(wrong, challenge, theirs, 1, 0);
      net::write_all(fd.get(), welcome.data(), welcome.size(), net::deadline_after(5s));
      store->wait({"done"}, 10s);
      return;
    }
    try {
      join_tcp(*store, 1, 2);
      ADD_FAILURE() << "joined an impostor";
    } catch (const PeerFailureError& e) {
      EXPECT_EQ(e.peer_rank(), 0);
      EXPECT_NE(std::string(e.what()).find("did not prove the job's secret"), std::string::npos) << e.what();
    }
    store->set("done", {1});
  });
}

// Rank 1 is the test itself: it passes the handshake, then breaks the frames.
void expect_broken_frame_named(const std::vector<std::uint8_t>& frame, const char* what) {
  testing::run_ranks(2, [&](int rank) {
    auto store = connect_job_store();
    if (rank == 0) {
      CommunicatorOptions options;
      options.peer_timeout = 5s;
      auto comm = join_tcp(*store, 0, 2, options);
      float data[4] = {1, 2, 3, 4};
      try {
        comm->allreduce(data, data, 4, DataType::Float32, ReduceOp::Sum);
        ADD_FAILURE() << "no error for " << what;
      } catch (const PeerFailureError& e) {
        EXPECT_EQ(e.peer_rank(), 1) << e.what();
        EXPECT_NE(std::string(e.what()).find("malformed frame"), std::string::npos) << e.what();
      }
      EXPECT_THROW(comm->barrier(), PeerFailureError);
      store->set("done", {1});
      return;
    }
    const auto [host, port] = tcp_address_of(*store, 0);
    net::Fd fd = net::connect_tcp(host, port, net::deadline_after(5s));
    const auto challenge = read_challenge(fd.get());
    tcp::Nonce nonce;
    const auto hello = tcp::hello_message({std::getenv("KOLO_SECRET"), kPrefix}, challenge, 1, 0, &nonce);
    net::write_all(fd.get(), hello.data(), hello.size(), net::deadline_after(5s));
    std::array<std::uint8_t, tcp::kWelcomeBytes> welcome;
    net::read_exact(fd.get(), welcome.data(), welcome.size(), net::deadline_after(5s));
    send_bytes(fd.get(), frame.data(), frame.size());
    store->wait({"done"}, 15s);
  });
}

std::vector<std::uint8_t> frame_of(std::uint32_t magic, std::uint32_t sequence, std::uint64_t bytes,
                                   std::size_t payload) {
  std::vector<std::uint8_t> f(16 + payload, 0);
  std::memcpy(f.data(), &magic, 4);
  std::memcpy(f.data() + 4, &sequence, 4);
  std::memcpy(f.data() + 8, &bytes, 8);
  return f;
}

constexpr std::uint32_t kMagic = 0x4b4f4c4f;

TEST(TcpFrames, GarbageFromAnAuthenticatedPeerNamesIt) {
  expect_broken_frame_named(std::vector<std::uint8_t>(64, 0x77), "garbage");
}

TEST(TcpFrames, AnOversizedFrameNamesItsSender) {
  expect_broken_frame_named(frame_of(kMagic, 0, 1ull << 40, 16), "an oversized frame");
}

TEST(TcpFrames, AFrameOutOfSequenceNamesItsSender) {
  expect_broken_frame_named(frame_of(kMagic, 7, 16, 16), "a frame out of sequence");
}

TEST(TcpSelfSized, BlocksMoveAtTheirOwnLengthAndBadLengthsAreRefused) {
  testing::run_ranks(3, [](int rank) {
    auto store = connect_job_store();
    auto comm = join_tcp(*store, rank, 3);
    EXPECT_GE(comm->capabilities().unpadded_block_bytes, std::size_t{1} << 20);
    const std::size_t max_block = 4096;
    for (int round = 0; round < 4; ++round) {
      std::vector<std::uint8_t> mine(max_block, 0xEE), all(3 * max_block, 0);
      const std::uint32_t length = static_cast<std::uint32_t>(4 + (rank * 1000 + round * 7) % (max_block - 4));
      std::memcpy(mine.data(), &length, 4);
      for (std::uint32_t i = 4; i < length; ++i) mine[i] = static_cast<std::uint8_t>(rank + i + round);
      comm->allgather_self_sized(mine.data(), all.data(), max_block);
      for (int r = 0; r < 3; ++r) {
        const std::uint8_t* block = all.data() + r * max_block;
        std::uint32_t got;
        std::memcpy(&got, block, 4);
        ASSERT_EQ(got, 4 + (r * 1000 + round * 7) % (max_block - 4));
        for (std::uint32_t i = 4; i < got; ++i) ASSERT_EQ(block[i], static_cast<std::uint8_t>(r + i + round));
      }
    }
    // Rank 2 declares a block longer than the others allow: they refuse it and stay in step.
    const std::size_t mine_max = rank == 2 ? 2 * max_block : max_block;
    std::vector<std::uint8_t> mine(mine_max, 0), all(3 * mine_max, 0);
    const std::uint32_t length = rank == 2 ? static_cast<std::uint32_t>(mine_max) : 8;
    std::memcpy(mine.data(), &length, 4);
    if (rank == 2) {
      EXPECT_NO_THROW(comm->allgather_self_sized(mine.data(), all.data(), mine_max));
    } else {
      EXPECT_THROW(comm->allgather_self_sized(mine.data(), all.data(), mine_max), InvalidArgumentError);
    }
    expect_sum_works(*comm);
  });
}

std::vector<std::uint8_t> pattern(std::size_t n, int seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed * 31 + i * 7);
  return v;
}

// A message of unknown length is read with its header in one readv that may go
// on past its end into the messages behind it: those bytes wait aside for their
// receives, posted later, and reach them whole, also a message longer than its
// capacity and one that the read-ahead holds only the start of.
TEST(TcpReadAhead, MessagesOfUnknownLengthHandTheBytesReadPastThemToTheNextOnes) {
  testing::run_ranks(2, [](int rank) {
    auto store = connect_job_store();
    MeshGroup group;
    group.rank = rank;
    group.size = 2;
    group.key_prefix = "tcp-read-ahead/";
    tcp::Mesh mesh(group, *store, {}, CommunicatorOptions{}, std::getenv("KOLO_SECRET"));
    // What rank 0 sends, in order: the length of each and whether it is self-sized.
    const std::vector<std::pair<std::size_t, bool>> messages = {
        {10, true}, {1000, false}, {0, true}, {5, false}, {3000, true}, {70000, false}, {64, true}, {7, false}};
    if (rank == 0) {
      std::vector<std::vector<std::uint8_t>> data;
      for (std::size_t i = 0; i < messages.size(); ++i) data.push_back(pattern(messages[i].first, static_cast<int>(i)));
      tcp::Exchange batch(mesh, "the test");
      for (std::size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].second) {
          batch.send_always(1, data[i].data(), data[i].size());
        } else {
          batch.send(1, data[i].data(), data[i].size());
        }
      }
      batch.wait();
    } else {
      // The first receive alone: with the rest already in the socket its read
      // takes 4 KiB, most of it from the messages behind it.
      std::this_thread::sleep_for(200ms);
      std::vector<std::uint8_t> first(4096, 0);
      std::size_t got_first = 99;
      {
        tcp::Exchange batch(mesh, "the test");
        batch.recv_any(0, first.data(), first.size(), &got_first);
        batch.wait();
      }
      EXPECT_EQ(got_first, 10u);
      EXPECT_TRUE(std::equal(first.begin(), first.begin() + 10, pattern(10, 0).begin()));
      std::this_thread::sleep_for(50ms);
      // The rest, with capacities that differ from the lengths (the 3000-byte one in 100).
      const std::vector<std::size_t> capacity = {0, 1000, 16, 5, 100, 70000, 64, 7};
      std::vector<std::vector<std::uint8_t>> in(messages.size());
      std::vector<std::size_t> got(messages.size(), 99);
      tcp::Exchange batch(mesh, "the test");
      for (std::size_t i = 1; i < messages.size(); ++i) {
        in[i].assign(capacity[i], 0);
        if (messages[i].second) {
          batch.recv_any(0, in[i].data(), in[i].size(), &got[i]);
        } else {
          batch.recv(0, in[i].data(), in[i].size());
        }
      }
      batch.wait();
      for (std::size_t i = 1; i < messages.size(); ++i) {
        const auto want = pattern(messages[i].first, static_cast<int>(i));
        const std::size_t kept = std::min(want.size(), in[i].size());
        if (messages[i].second) EXPECT_EQ(got[i], messages[i].first) << "message " << i;
        EXPECT_TRUE(std::equal(want.begin(), want.begin() + kept, in[i].begin())) << "message " << i;
      }
    }
    // The streams are still in step: one more exchange both ways.
    std::uint64_t mine = 1000 + rank, theirs = 0;
    tcp::Exchange batch(mesh, "the check");
    batch.send(1 - rank, &mine, sizeof mine);
    batch.recv(1 - rank, &theirs, sizeof theirs);
    batch.wait();
    EXPECT_EQ(theirs, 1000u + (1 - rank));
  });
}

}  // namespace
}  // namespace kolo::comm
