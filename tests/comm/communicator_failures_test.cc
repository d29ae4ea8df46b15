// The failure contract of comm/communicator.h on every communicator
// (tests/harness/communicator_factories.h), on real processes: a killed peer,
// between calls or inside one, and a stopped peer are named by every survivor in
// a PeerFailureError within seconds, and the communicator stays failed with the
// same error; abort() from another thread wakes a waiting call with a
// ShutdownError carrying its reason, and every later call throws it too. mpi is
// not here: mpirun, not the communicator, ends a job whose rank died or stalled
// (mpi_test.cc).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "harness/communicator_factories.h"
#include "harness/job_store.h"
#include "harness/time_bound.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using comm::Communicator;

class CommunicatorFailures : public ::testing::TestWithParam<Job> {
 protected:
  void SetUp() override {
    if (!job().factory->available()) GTEST_SKIP() << job().factory->name << " is not in this build";
  }
  const Job& job() const { return GetParam(); }
  const CommunicatorFactory& factory() const { return *GetParam().factory; }
  int ranks() const { return GetParam().ranks(); }
};
// Peers that die or stall: jobs of more than one rank.
using CommunicatorPeerFailures = CommunicatorFailures;
using CommunicatorAbort = CommunicatorFailures;

std::vector<Job> jobs_with_peers() {
  std::vector<Job> jobs;
  for (const Job& job : failure_jobs())
    if (job.ranks() > 1) jobs.push_back(job);
  return jobs;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// `error` names `victim` (by its rank and in words), and later calls fail with
// the same error.
void expect_names(Communicator& comm, const PeerFailureError& error, int victim, const std::string& words) {
  EXPECT_EQ(error.peer_rank(), victim) << error.what();
  EXPECT_TRUE(contains(error.what(), "rank " + std::to_string(victim))) << error.what();
  if (!words.empty()) EXPECT_TRUE(contains(error.what(), words)) << error.what();
  try {
    comm.barrier();
    ADD_FAILURE() << "barrier after a peer failure succeeded";
  } catch (const PeerFailureError& again) {
    EXPECT_STREQ(again.what(), error.what());
  }
}

// Survivors stay alive until every one of them has its error, as a rank's engine
// does: nobody may learn of the failure from another survivor's exit.
void wait_for_survivors(store::StoreClient& store, int survivors) {
  store.add("caught", 1);
  const auto start = Clock::now();
  while (store.add("caught", 0) < survivors && Clock::now() - start < 20s) std::this_thread::sleep_for(10ms);
}

// Ranks that see the failure exit 0; the victim was killed.
void expect_survivors_passed(const std::vector<RankOutcome>& outcomes, int victim) {
  for (const auto& o : outcomes) {
    if (o.rank == victim) {
      EXPECT_EQ(o.signal, SIGKILL) << "the victim, rank " << victim;
      continue;
    }
    EXPECT_TRUE(o.exited && o.exit_code == 0) << "rank " << o.rank << " exit " << o.exit_code << " signal "
                                              << o.signal << (o.timed_out ? " (timed out)" : "");
  }
}

// A job with a victim: the survivors, each bounding its own detection time and
// waiting for the others (wait_for_survivors), get time to finish on their own
// after the victim's death, as slow as a busy machine makes them.
SpawnOptions victim_spawn_options(const Job& job) {
  SpawnOptions options = spawn_options(job);
  options.grace = 25s;
  return options;
}

// Long enough that only the death can explain a failure found in seconds.
comm::CommunicatorOptions detection_by_death() {
  comm::CommunicatorOptions options;
  options.peer_timeout = 20s;
  return options;
}

TEST_P(CommunicatorPeerFailures, PeerKilledBetweenCallsIsNamedOnEveryRank) {
  const int victim = ranks() - 1;
  for (std::size_t count : {std::size_t{4}, std::size_t{100000}}) {
    auto outcomes = spawn_ranks(ranks(), [&](int rank) {
      auto store = connect_job_store();
      Member m = join_job(job(), detection_by_death());
      std::vector<float> data(count, 1.0f);
      m.comm->allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
      if (rank == victim) {
        std::this_thread::sleep_for(100ms);  // the survivors wait for it in the next allreduce
        ::raise(SIGKILL);
      }
      const auto start = Clock::now();
      try {
        for (int i = 0; i < 1000; ++i)
          m.comm->allreduce(data.data(), data.data(), count, DataType::Float32, ReduceOp::Sum);
        ADD_FAILURE() << "no error after rank " << victim << " was killed";
      } catch (const PeerFailureError& e) {
        EXPECT_LT(Clock::now() - start, time_bound(3s)) << e.what();
        expect_names(*m.comm, e, victim, factory().killed_peer_words);
      }
      wait_for_survivors(*store, ranks() - 1);
    }, victim_spawn_options(job()));
    expect_survivors_passed(outcomes, victim);
  }
}

// Runs `call` on `m` until it throws: `victim`, which kills itself `after` this
// begins, must be named within seconds of the last call that succeeded. A
// survivor that exchanges nothing with the victim in the call under way finishes
// that call first and fails in the next, and on two busy cores one call of a
// large transfer takes seconds (a 64 MiB hierarchical broadcast took 4 s beside
// three other jobs): so the bound adds the time a whole call takes here and now,
// measured on a call before the victim's timer starts. The timer starts once
// every rank has finished that call (counted in the store): a survivor still in
// it could otherwise fail it outside the test's watch.
template <typename Call>
void call_until_victim_named(const Job& job, store::StoreClient& store, Member& m, int rank, int victim,
                             std::chrono::milliseconds after, Call call) {
  auto last_success = Clock::now();
  call();
  const auto one_call = Clock::now() - last_success;
  store.add("timed", 1);
  if (rank == victim) {
    const auto start = Clock::now();
    while (store.add("timed", 0) < job.ranks() && Clock::now() - start < 20s) std::this_thread::sleep_for(1ms);
    std::thread([after] {
      std::this_thread::sleep_for(after);
      ::raise(SIGKILL);
    }).detach();
  }
  last_success = Clock::now();
  try {
    for (int i = 0; i < 100000; ++i) {
      call();
      last_success = Clock::now();
    }
    ADD_FAILURE() << "no error after rank " << victim << " was killed";
  } catch (const PeerFailureError& e) {
    EXPECT_LT(Clock::now() - last_success, time_bound(3s) + 2 * one_call) << e.what();
    expect_names(*m.comm, e, victim, job.factory->killed_peer_words);
  }
}

TEST_P(CommunicatorPeerFailures, PeerKilledInsideACallIsNamedOnEveryRank) {
  const int victim = ranks() / 2;
  auto outcomes = spawn_ranks(ranks(), [&](int rank) {
    auto store = connect_job_store();
    Member m = join_job(job(), detection_by_death());
    const std::size_t count = 4 << 20;  // 16 MiB: many chunks and rounds
    std::vector<float> in(count, 1.0f), out(count);
    m.comm->allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
    // Dies at a random point inside the following allreduces.
    call_until_victim_named(job(), *store, m, rank, victim, 30ms, [&] {
      m.comm->allreduce(in.data(), out.data(), count, DataType::Float32, ReduceOp::Sum);
    });
    wait_for_survivors(*store, ranks() - 1);
  }, victim_spawn_options(job()));
  expect_survivors_passed(outcomes, victim);
}

// One transfer far larger than the sockets' buffers, cut by the death of its
// sender (the root) or of a receiver: the survivors' halves of it, part written
// or part read, end at once too.
TEST_P(CommunicatorPeerFailures, PeerKilledInsideALargeTransferIsNamedOnEveryRank) {
  for (int victim : {0, ranks() - 1}) {
    auto outcomes = spawn_ranks(ranks(), [&](int rank) {
      auto store = connect_job_store();
      Member m = join_job(job(), detection_by_death());
      std::vector<std::uint8_t> data(std::size_t{64} << 20, 7);
      m.comm->barrier();
      // Mid-transfer: 64 MiB take tens of ms.
      call_until_victim_named(job(), *store, m, rank, victim, 5ms,
                              [&] { m.comm->broadcast(data.data(), data.size(), 0); });
      wait_for_survivors(*store, ranks() - 1);
    }, victim_spawn_options(job()));
    expect_survivors_passed(outcomes, victim);
  }
}

// The same inside an allgather, in which every rank sends and receives.
TEST_P(CommunicatorPeerFailures, PeerKilledInsideALargeAllgatherIsNamedOnEveryRank) {
  const int victim = ranks() - 1;
  auto outcomes = spawn_ranks(ranks(), [&](int rank) {
    auto store = connect_job_store();
    Member m = join_job(job(), detection_by_death());
    const std::size_t block = (std::size_t{64} << 20) / static_cast<std::size_t>(ranks());
    std::vector<std::uint8_t> mine(block, static_cast<std::uint8_t>(rank)), all(block * ranks());
    const std::vector<std::size_t> sizes(static_cast<std::size_t>(ranks()), block);
    m.comm->barrier();
    call_until_victim_named(job(), *store, m, rank, victim, 5ms,
                            [&] { m.comm->allgatherv(mine.data(), block, all.data(), sizes); });
    wait_for_survivors(*store, ranks() - 1);
  }, victim_spawn_options(job()));
  expect_survivors_passed(outcomes, victim);
}

TEST_P(CommunicatorPeerFailures, StoppedPeerIsNamedAfterThePeerTimeout) {
  const int victim = 1;
  run_ranks(ranks(), [&](int rank) {
    auto store = connect_job_store();
    comm::CommunicatorOptions options;
    options.peer_timeout = 1s;
    Member m = join_job(job(), options);
    m.comm->barrier();
    if (rank == victim) {
      const std::string pid = std::to_string(::getpid());
      store->set("victim-pid", store::Bytes(pid.begin(), pid.end()));
      ::raise(SIGSTOP);
      // Continued once every survivor has its error: it finds its peers gone.
      try {
        for (int i = 0; i < 1000000; ++i) m.comm->barrier();
        ADD_FAILURE() << "no error after the peers failed";
      } catch (const PeerFailureError&) {
      }
      return;
    }
    const auto pid = store->get("victim-pid", 10s);
    std::this_thread::sleep_for(100ms);  // until it is stopped
    const auto start = Clock::now();
    int named = -1;
    try {
      for (int i = 0; i < 1000000; ++i) m.comm->barrier();
      ADD_FAILURE() << "no error while rank " << victim << " is stopped";
    } catch (const PeerFailureError& e) {
      EXPECT_LT(Clock::now() - start, time_bound(3s)) << e.what();
      named = e.peer_rank();
      if (factory().names_stalled_rank) expect_names(*m.comm, e, victim, factory().stalled_peer_words);
    }
    const std::string mine = std::to_string(named);
    store->set("named/" + std::to_string(rank), store::Bytes(mine.begin(), mine.end()));
    wait_for_survivors(*store, ranks() - 1);
    for (int r = 0; r < ranks(); ++r) {
      if (r == victim) continue;
      const auto theirs = store->get("named/" + std::to_string(r), 10s);
      EXPECT_EQ(std::string(theirs.begin(), theirs.end()), mine) << "rank " << r << " named another rank";
    }
    if (rank == 0) ::kill(std::stoi(std::string(pid.begin(), pid.end())), SIGCONT);
  }, spawn_options(job()));
}

TEST_P(CommunicatorAbort, AbortWakesAWaitingCallAndFailsEveryLaterOne) {
  run_ranks(ranks(), [&](int rank) {
    auto store = connect_job_store();
    Member m = join_job(job());
    Communicator& comm = *m.comm;
    comm.barrier();
    std::vector<float> data(1000, 1.0f);
    if (rank == 0) {
      Clock::time_point aborted_at;
      std::thread aborter([&] {
        std::this_thread::sleep_for(200ms);
        aborted_at = Clock::now();
        comm.abort("test abort");
      });
      if (comm.size() == 1) aborter.join();  // a job of one never waits: the abort comes first
      // Its peers are not calling yet: this waits until the abort.
      try {
        comm.allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        ADD_FAILURE() << "allreduce returned";
      } catch (const ShutdownError& e) {
        EXPECT_STREQ(e.what(), "test abort");
        if (comm.size() > 1) EXPECT_LT(Clock::now() - aborted_at, time_bound(100ms));
      }
      if (aborter.joinable()) aborter.join();
      EXPECT_THROW(comm.barrier(), ShutdownError);
      EXPECT_THROW(comm.broadcast(data.data(), 4, 0), ShutdownError);
      store->set("aborted", {1});
      wait_for_survivors(*store, comm.size());
      return;
    }
    if (factory().abort_seen_by_peers.empty()) {
      store->wait({"aborted"}, 10s);  // stays away from the collective until rank 0 is done with it
    } else {
      std::this_thread::sleep_for(500ms);
      // Rank 0 may have posted its data before it aborted, so the first call may
      // still complete; after that rank 0 is known to have aborted.
      try {
        for (int i = 0; i < 3; ++i)
          comm.allreduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
        ADD_FAILURE() << "no error after rank 0 aborted";
      } catch (const PeerFailureError& e) {
        EXPECT_EQ(e.peer_rank(), 0) << e.what();
        EXPECT_TRUE(contains(e.what(), factory().abort_seen_by_peers + "test abort")) << e.what();
      }
    }
    wait_for_survivors(*store, comm.size());
  }, spawn_options(job()));
}

INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorPeerFailures, ::testing::ValuesIn(jobs_with_peers()),
                         [](const auto& info) { return job_name(info.param); });
INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorAbort, ::testing::ValuesIn(failure_jobs()),
                         [](const auto& info) { return job_name(info.param); });

}  // namespace
}  // namespace kolo::testing
