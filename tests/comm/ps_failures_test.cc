// Faults in parameter-server mode, on real processes (forked workers, real
// kolo-server processes): a server killed or stopped is named ("server 1") on
// every worker within KOLO_PEER_TIMEOUT; a worker killed or stopped is named by
// the servers, which close every connection so that every other worker names
// it too, and then leave; strangers at a server's port and workers that break
// the protocol are refused without harm to anyone else.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/ps/ps_communicator.h"
#include "comm/ps/ps_protocol.h"
#include "comm/shm/shm_communicator.h"
#include "comm/tcp/tcp_handshake.h"
#include "comm/tcp/tcp_mesh.h"
#include "harness/communicator_factories.h"
#include "harness/job_store.h"
#include "harness/multiprocess.h"
#include "harness/time_bound.h"
#include "kolo/kolo.h"
#include "net/socket.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string text_of(const store::Bytes& bytes) { return std::string(bytes.begin(), bytes.end()); }

// The parent publishes the servers' pids, so that a worker can act on them.
std::function<void(const StartedJob&)> publish_server_pids() {
  return [](const StartedJob& job) {
    const auto address = store::parse_store_address(job.store_addr);
    auto client = store::StoreClient::connect(address.host, address.port, job.secret, 10s);
    for (std::size_t s = 0; s < job.server_pids.size(); ++s) {
      const std::string pid = std::to_string(job.server_pids[s]);
      client->set("test/server-pid/" + std::to_string(s), store::Bytes(pid.begin(), pid.end()));
    }
  };
}

pid_t server_pid(store::StoreClient& store, int server) {
  return std::stoi(text_of(store.get("test/server-pid/" + std::to_string(server), 10s)));
}

// Whether process `pid` has ended (gone, or a zombie its parent has not reaped).
bool has_ended(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const auto close = line.rfind(')');
  return close == std::string::npos || line.substr(close + 2, 1) == "Z";
}

// Survivors stay until all of them have their error: nobody learns it from
// another survivor's exit.
void wait_for_survivors(store::StoreClient& store, int survivors) {
  store.add("caught", 1);
  const auto start = Clock::now();
  while (store.add("caught", 0) < survivors && Clock::now() - start < 20s) std::this_thread::sleep_for(10ms);
}

// A worker of a one-server job at the communicator (the harness's ps factory).
Member join_ps_worker(int workers, std::chrono::milliseconds peer_timeout) {
  comm::CommunicatorOptions timeouts;
  timeouts.peer_timeout = peer_timeout;
  const auto& factories = communicator_factories();
  const auto ps = std::find_if(factories.begin(), factories.end(), [](const auto& f) { return f.name == "ps_1server"; });
  return ps->join({.per_host = workers, .hosts = 1}, timeouts);
}

SpawnOptions ps_job(int servers, const char* peer_timeout) {
  SpawnOptions options;
  options.servers = servers;
  options.env["KOLO_PEER_TIMEOUT"] = peer_timeout;
  options.env["KOLO_PS_PARTITION_BYTES"] = "65536";  // every server has a part of each large allreduce
  options.on_started = publish_server_pids();
  return options;
}

// Allreduces of 1 MiB until one fails; the error it failed with.
PeerFailureError allreduce_until_failure() {
  std::vector<float> data(1 << 18, 1.0f);
  try {
    for (int i = 0; i < 100000; ++i) kolo::allreduce(make_tensor(data.data(), static_cast<std::int64_t>(data.size())));
  } catch (const PeerFailureError& e) {
    return e;
  }
  ADD_FAILURE() << "no error";
  return PeerFailureError(-2, "no error");
}

TEST(PsFailures, KilledServerIsNamedOnEveryWorker) {
  const int workers = 3;
  auto outcomes = spawn_ranks(workers, [&](int rank) {
    auto store = connect_job_store();
    kolo::init();
    float x = 1;
    kolo::allreduce(make_tensor(&x, 1));
    store->add("ready", 1);
    if (rank == 0) {
      while (store->add("ready", 0) < workers) std::this_thread::sleep_for(5ms);
      std::this_thread::sleep_for(100ms);  // the others are in their allreduces
      ::kill(server_pid(*store, 1), SIGKILL);
    }
    const auto start = Clock::now();
    const PeerFailureError e = allreduce_until_failure();
    EXPECT_LT(Clock::now() - start, time_bound(3s)) << e.what();
    EXPECT_EQ(e.peer_rank(), -1) << e.what();
    EXPECT_TRUE(contains(e.what(), "server 1")) << e.what();
    wait_for_survivors(*store, workers);
  }, ps_job(2, "20"));
  for (const auto& o : outcomes) {
    if (o.server == 1) EXPECT_EQ(o.signal, SIGKILL);
    else EXPECT_TRUE(o.exited && o.exit_code == 0 && !o.timed_out)
        << (o.server >= 0 ? "server " : "rank ") << (o.server >= 0 ? o.server : o.rank) << ": exit " << o.exit_code
        << " signal " << o.signal;
  }
}

TEST(PsFailures, StoppedServerIsNamedWithinThePeerTimeout) {
  const int workers = 2;
  run_ranks(workers, [&](int rank) {
    auto store = connect_job_store();
    kolo::init();
    float x = 1;
    kolo::allreduce(make_tensor(&x, 1));
    store->add("ready", 1);
    const pid_t victim = server_pid(*store, 0);
    if (rank == 0) {
      while (store->add("ready", 0) < workers) std::this_thread::sleep_for(5ms);
      ::kill(victim, SIGSTOP);
    }
    const auto start = Clock::now();
    const PeerFailureError e = allreduce_until_failure();
    EXPECT_LT(Clock::now() - start, time_bound(2s + 2s)) << e.what();  // KOLO_PEER_TIMEOUT=2 and room
    EXPECT_TRUE(contains(e.what(), "server 0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "no progress")) << e.what();
    wait_for_survivors(*store, workers);
    if (rank == 0) ::kill(victim, SIGCONT);  // it finds its workers gone and leaves
  }, ps_job(2, "2"));
}

TEST(PsFailures, KilledWorkerIsNamedAndTheServersLeave) {
  const int workers = 3, victim = 2;
  auto outcomes = spawn_ranks(workers, [&](int rank) {
    auto store = connect_job_store();
    kolo::init();
    float x = 1;
    kolo::allreduce(make_tensor(&x, 1));
    if (rank == victim) {
      std::this_thread::sleep_for(200ms);  // the others wait for it at the servers
      ::raise(SIGKILL);
    }
    const PeerFailureError e = allreduce_until_failure();
    EXPECT_EQ(e.peer_rank(), victim) << e.what();
    EXPECT_TRUE(contains(e.what(), "rank " + std::to_string(victim))) << e.what();
    // The servers leave on their own while the job and its store are still there.
    for (int s = 0; s < 2; ++s) {
      const pid_t pid = server_pid(*store, s);
      const auto start = Clock::now();
      while (!has_ended(pid) && Clock::now() - start < time_bound(5s)) std::this_thread::sleep_for(10ms);
      EXPECT_TRUE(has_ended(pid)) << "server " << s << " is still running";
    }
    wait_for_survivors(*store, workers - 1);
  }, ps_job(2, "20"));
  for (const auto& o : outcomes) {
    if (o.server < 0 && o.rank == victim) continue;
    EXPECT_TRUE(o.exited && o.exit_code == 0 && !o.timed_out)
        << (o.server >= 0 ? "server " : "rank ") << (o.server >= 0 ? o.server : o.rank) << ": exit " << o.exit_code
        << " signal " << o.signal;
  }
}

// At the communicator, where a worker can stop between the negotiation and its
// push: the server waiting for that push names the worker, not itself.
TEST(PsFailures, StoppedWorkerIsNamedByTheServerOnEveryWorker) {
  const int workers = 3, victim = 1;
  SpawnOptions options = ps_job(1, "2");
  run_ranks(workers, [&](int rank) {
    auto store = connect_job_store();
    Member m = join_ps_worker(workers, 2s);
    std::vector<float> data(1000, 1.0f);
    m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
    if (rank == victim) {
      const std::string pid = std::to_string(::getpid());
      store->set("victim-pid", store::Bytes(pid.begin(), pid.end()));
      ::raise(SIGSTOP);
      try {  // continued once the others have their error: it finds the server gone
        m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        ADD_FAILURE() << "no error after the job failed";
      } catch (const PeerFailureError&) {
      }
      return;
    }
    const pid_t pid = std::stoi(text_of(store->get("victim-pid", 10s)));
    std::this_thread::sleep_for(100ms);
    const auto start = Clock::now();
    try {
      m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
      ADD_FAILURE() << "no error while rank " << victim << " is stopped";
    } catch (const PeerFailureError& e) {
      EXPECT_LT(Clock::now() - start, time_bound(3s)) << e.what();  // half the peer timeout, and room
      EXPECT_EQ(e.peer_rank(), victim) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank 1 made no progress")) << e.what();
    }
    wait_for_survivors(*store, workers - 1);
    if (rank == 0) ::kill(pid, SIGCONT);
  }, options);
}

// A worker that sends a malformed push, or pushes out of step with the others,
// is named by the server; the server does not crash, and leaves.
TEST(PsFailures, ProtocolBreakersAreNamed) {
  enum class Breach { Malformed, OtherCount, OtherScale };
  for (const Breach breach : {Breach::Malformed, Breach::OtherCount, Breach::OtherScale}) {
    const bool malformed = breach == Breach::Malformed;
    SCOPED_TRACE(malformed ? "malformed push" : breach == Breach::OtherCount ? "another count" : "another scale");
    auto outcomes = spawn_ranks(2, [&](int rank) {
      auto store = connect_job_store();
      std::vector<float> data(100, 1.0f);
      if (rank == 0) {
        Member m = join_ps_worker(2, 20s);
        try {
          m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
          ADD_FAILURE() << "the allreduce succeeded";
        } catch (const PeerFailureError& e) {
          EXPECT_EQ(e.peer_rank(), 1) << e.what();
          EXPECT_TRUE(contains(e.what(), malformed ? "rank 1 sent a malformed push" : "rank 1 is out of step"))
              << e.what();
          if (breach == Breach::OtherScale) EXPECT_TRUE(contains(e.what(), "divided by 2")) << e.what();
        }
        return;
      }
      // Rank 1 joins the workers' own communicator as init() would, then
      // speaks to the server itself, with the job's secret.
      store->set("init/0/rank/1", {1});
      comm::CommunicatorOptions options;
      auto workers = comm::make_shm_communicator(1, 2, std::string(std::getenv("KOLO_JOB_ID")) + "-0", options,
                                                 std::getenv("KOLO_SECRET"));
      comm::tcp::Mesh mesh(comm::ps::server_group(0, 1, 2, 2), *store, comm::MeshNetwork{}, options, std::getenv("KOLO_SECRET"));
      // Rank 0 pushes 100 floats to be summed as they are.
      comm::ps::PushHeader push{comm::ps::Kind::Push, DataType::Float32, ReduceOp::Sum, 0, 0, 100};
      if (breach == Breach::OtherCount) push.count = 101;
      if (breach == Breach::OtherScale) push.scale = comm::ResultScale::divide(2);
      comm::ps::EncodedHeader header = comm::ps::encode(push);
      if (malformed) header[0] ^= 0xff;
      comm::tcp::Exchange out(mesh, "a test's push");
      out.send(0, header.data(), header.size());
      out.wait();
      std::uint8_t byte;
      comm::tcp::Exchange in(mesh, "a test's wait");
      in.recv(0, &byte, 1);
      EXPECT_THROW(in.wait(), PeerFailureError);  // the server closes on it
    }, ps_job(1, "20"));
    for (const auto& o : outcomes)
      EXPECT_TRUE(o.exited && o.exit_code == 0 && !o.timed_out) << (o.server >= 0 ? "server " : "rank ")
                                                                 << (o.server >= 0 ? o.server : o.rank);
  }
}

}  // namespace
}  // namespace kolo::testing

namespace kolo::testing {
namespace {

// Connections from outside the job while a server waits for its workers: bytes
// that are no handshake, a handshake without the secret, and one that never
// speaks are refused; the workers get in and the job is right. Once every
// worker is in, the server listens no more.
TEST(PsFailures, StrangersAtAServerPortAreRefused) {
  run_ranks(2, [&](int rank) {
    auto store = connect_job_store();
    std::vector<float> data(1000, static_cast<float>(rank + 1));
    if (rank == 1) {
      store->wait({"strangers-done"}, 30s);
      Member m = join_ps_worker(2, 20s);
      m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
      EXPECT_EQ(data[999], 3.0f);
      return;
    }
    store->set("init/0/rank/0", {1});
    store->set("init/0/rank/1", {1});  // the server begins its session and listens
    const std::string address = text_of(store->get("comm/0/ps/tcp/addr/0", 10s));
    const std::string host = address.substr(0, address.rfind(':'));
    const int port = std::stoi(address.substr(address.rfind(':') + 1));
    const auto deadline = net::deadline_after(5s);
    net::Fd garbage = net::connect_tcp(host, port, deadline);
    const std::string junk(200, 'x');
    net::write_all(garbage.get(), junk.data(), junk.size(), deadline);
    net::Fd impostor = net::connect_tcp(host, port, deadline);
    std::array<std::uint8_t, comm::tcp::kChallengeBytes> challenge{};
    net::read_exact(impostor.get(), challenge.data(), challenge.size(), deadline);
    comm::tcp::Nonce mine;
    const auto hello = comm::tcp::hello_message({"not the job's secret", "comm/0/ps/"}, challenge, 2, 0, &mine);
    net::write_all(impostor.get(), hello.data(), hello.size(), deadline);
    net::Fd silent = net::connect_tcp(host, port, deadline);
    store->set("strangers-done", {1});
    Member m = join_ps_worker(2, 20s);
    m.comm->allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(data[0], 3.0f);
    EXPECT_THROW(net::connect_tcp(host, port, net::deadline_after(2s)), net::SocketError);
  }, ps_job(1, "20"));
}

}  // namespace
}  // namespace kolo::testing
