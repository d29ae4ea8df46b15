// Runs a test body on N real processes, as a job of N ranks on this host.
//
// run_ranks forks `size` children. Each child gets the environment kolorun would
// give it (KOLO_RANK, KOLO_SIZE, local and cross ranks, a fresh KOLO_JOB_ID, and a
// store address and secret when a store is used), runs body(rank) and exits 0 only
// if the body raised no GoogleTest failure and threw nothing. The parent waits,
// kills every child if one fails (after a short grace) or when the timeout passes
// (printing each one's stacks first, through gdb), removes the job's shared-memory
// segments, and reports each rank's outcome as a GoogleTest failure. Nothing
// outlives the call.
//
// The store runs in a process of its own, forked first, so that the test process
// has no other thread when it forks the ranks (a lock held by another thread at
// fork() would stay locked forever in the child). Tests should keep it that way:
// start threads of their own only after the ranks are forked (see on_started).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace kolo::testing {

// What the parent knows of a job it started, for tests that act on the job from
// outside (signals to a rank, traffic to the store) or look for leftovers.
struct StartedJob {
  std::string job_id;
  std::string store_addr;  // "127.0.0.1:port"; empty without a store
  std::string secret;      // the store's
  std::vector<int> pids;   // by rank
  std::vector<int> server_pids;  // by server (SpawnOptions::servers)
};

struct SpawnOptions {
  std::chrono::seconds timeout{120};
  // Start a rendezvous store in the parent and point the ranks at it.
  bool use_store = true;
  // Extra environment for every rank (KOLO_FUSION_THRESHOLD, ...).
  std::map<std::string, std::string> env;
  // After one rank fails, how long the others may take to finish on their own.
  std::chrono::milliseconds grace{3000};
  // Called in the parent once every rank is forked, before it waits for them. The
  // ranks are reaped only after it returns: keep it short, or hand longer work to
  // a thread that the test joins after the job.
  std::function<void(const StartedJob&)> on_started{};
  // Parameter servers (comm/ps): this many kolo-server processes, started with
  // the job's store after the ranks, and KOLO_NUM_SERVERS for every rank. Once
  // the ranks are done the store goes, and every server must leave by itself
  // within server_exit_wait (else it is killed and counted as timed out).
  int servers = 0;
  std::chrono::milliseconds server_exit_wait{10000};
};

struct RankOutcome {
  int rank = 0;
  int server = -1;  // >= 0: the outcome of that server, not of a rank
  bool exited = false;      // exited normally (else killed by a signal or by us)
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
};

// Runs the job and returns each rank's outcome, then each server's, without judging them.
std::vector<RankOutcome> spawn_ranks(int size, const std::function<void(int rank)>& body,
                                     const SpawnOptions& options = {});

// Runs the job and adds a GoogleTest failure for every rank (and server) that did not exit 0.
void run_ranks(int size, const std::function<void(int rank)>& body, const SpawnOptions& options = {});

// A fresh random job id (hex), as kolorun makes.
std::string make_job_id();

}  // namespace kolo::testing
