// Elastic jobs end to end: kolorun --min-np/--max-np with kolo_elastic_worker
// (tests/programs/), which trains under kolo::elastic::run and prints its final
// state. A lost worker (exit, SIGKILL, a stall, its own error) leaves the others
// training from their last commit; new slots from a discovery script bring new
// workers, which take the survivors' state; and the job fails, saying why, when
// too few workers are left, all fail, or the reset limit passes.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "harness/kolorun_process.h"
#include "harness/time_bound.h"

#ifndef KOLORUN_PATH
#error "tests/CMakeLists.txt defines KOLORUN_PATH as the kolorun binary"
#endif

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using kolo::testing::RunResult;
using kolo::testing::time_bound;

struct Finished {
  int rank, size, steps;
  std::string checksum;
};

// worker id -> its final line, from the job's stdout.
std::map<int, Finished> finished_workers(const std::string& out) {
  std::map<int, Finished> result;
  const std::regex line(R"(worker (\d+) rank (\d+) size (\d+) steps (\d+) checksum (\S+))");
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) {
    const auto& m = *it;
    result[std::stoi(m[1])] = Finished{std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4]), m[5]};
  }
  return result;
}

RunResult run_elastic(const std::vector<std::string>& args, std::chrono::milliseconds timeout = 60s,
                      const kolo::testing::Subprocess::Environment& env = {}) {
  std::vector<std::string> argv{KOLORUN_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  return kolo::testing::run_command(argv, time_bound(timeout), env);
}

// Every worker in `expected` finished all `steps` in a world of `size`, with
// one and the same state.
void expect_finished_alike(const RunResult& r, const std::set<int>& expected, int size, int steps) {
  const auto done = finished_workers(r.out);
  std::set<int> ids;
  for (const auto& [id, f] : done) ids.insert(id);
  EXPECT_EQ(ids, expected) << r.out << r.err;
  std::set<std::string> checksums;
  std::set<int> ranks;
  for (const auto& [id, f] : done) {
    EXPECT_EQ(f.size, size) << "worker " << id;
    EXPECT_EQ(f.steps, steps) << "worker " << id;
    checksums.insert(f.checksum);
    ranks.insert(f.rank);
  }
  EXPECT_EQ(checksums.size(), 1u) << r.out;
  EXPECT_EQ(static_cast<int>(ranks.size()), size) << r.out;
}

class KolorunElastic : public ::testing::TestWithParam<const char*> {};

// Worker 2 of 4 fails at step 10 (exits, is killed, or throws); the others go on
// with the state they committed and finish alike.
TEST_P(KolorunElastic, SurvivorsFinishAfterAWorkerIsLost) {
  const std::string how = GetParam();
  const auto r = run_elastic({"-np", "4", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "40", how, "2", "10"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  if (how == "throw") {
    // Its own error: it resets with the others and stays.
    expect_finished_alike(r, {0, 1, 2, 3}, 4, 40);
    EXPECT_NE(r.err.find("worker 2 reset at step 10"), std::string::npos) << r.err;
  } else {
    expect_finished_alike(r, {0, 1, 3}, 3, 40);
    EXPECT_NE(r.err.find("elastic: generation 1 has 3 worker(s)"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("worker 0 reset at step 10: rank 0 of 3"), std::string::npos) << r.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Faults, KolorunElastic, ::testing::Values("exit", "kill", "throw"));

// A stopped worker is blamed by its peers after KOLO_PEER_TIMEOUT, killed, and
// the job goes on without it.
TEST(KolorunElasticStall, AStoppedWorkerIsKilledAndTheOthersGoOn) {
  const auto r = run_elastic({"-np", "3", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "30", "stop", "1", "5"}, 60s,
                             {{"KOLO_PEER_TIMEOUT", "2"}});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 2}, 2, 30);
  // Stopped on this machine: killed without the grace a running one gets.
  EXPECT_NE(r.err.find("blames worker 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("which is stopped; killing it"), std::string::npos) << r.err;
}

// Rank 0, which holds the state every sync gives out, is killed: the oldest
// survivor becomes rank 0 and the others take its state.
TEST(KolorunElasticFaults, RankZeroKilled) {
  const auto r = run_elastic({"-np", "3", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "30", "kill", "0", "8"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {1, 2}, 2, 30);
  EXPECT_NE(r.err.find("worker 1 reset at step 8: rank 0 of 2"), std::string::npos) << r.err;
}

// A second worker dies inside the sync that follows the first loss: the sync
// fails, the survivors restore their commit and re-form once more.
TEST(KolorunElasticFaults, AKillDuringTheSyncAfterALossIsSurvived) {
  const auto r = run_elastic({"-np", "4", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "30", "kill", "2", "10",
                              "sync-kill", "1", "10"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 3}, 2, 30);
  EXPECT_NE(r.err.find("elastic: generation 2 has 2 worker(s)"), std::string::npos) << r.err;
}

// A worker dies inside a commit (half saved), and while the others re-form
// another dies in its reset callback, after the job re-formed and before the
// sync: the last two restore their commits and re-form once more.
TEST(KolorunElasticFaults, KillsInsideACommitAndInsideAResetAreSurvived) {
  const auto r = run_elastic({"-np", "4", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "30", "save-kill", "3", "10",
                              "reset-kill", "2", "9"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 1}, 2, 30);
  EXPECT_NE(r.err.find("elastic: generation 2 has 2 worker(s)"), std::string::npos) << r.err;
}

// A process set made before a reset is refused after it, with a message that
// says to add it again; the set added again works, under an id of its own.
TEST(KolorunElasticFaults, ProcessSetsOfAnEarlierGenerationAreRefused) {
  const auto r = run_elastic({"-np", "3", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "20", "exit", "2", "5"}, 60s,
                             {{"KOLO_TEST_PROCESS_SET", "1"}});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 1}, 2, 20);
  EXPECT_NE(r.err.find("worker 0: old set refused: process set 1 belongs to an earlier generation"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("worker 1: new set 65537 sums to 2"), std::string::npos) << r.err;
}

// Two failures in a row, the second in the world the first left.
TEST(KolorunElasticLimits, TwoFailuresPassAResetLimitOfTwoAndFailOne) {
  const std::vector<std::string> faults{KOLO_ELASTIC_WORKER_PATH, "40", "exit", "3", "5", "kill", "2", "15"};
  auto args = std::vector<std::string>{"-np", "4", "--min-np", "2", "--reset-limit", "2"};
  args.insert(args.end(), faults.begin(), faults.end());
  const auto ok = run_elastic(args);
  ASSERT_TRUE(ok.exited && ok.exit_code == 0) << ok.out << ok.err;
  expect_finished_alike(ok, {0, 1}, 2, 40);

  args[5] = "1";
  const auto limited = run_elastic(args);
  EXPECT_TRUE(limited.exited && limited.exit_code != 0) << limited.out << limited.err;
  EXPECT_NE(limited.err.find("past --reset-limit 1"), std::string::npos) << limited.err;
}

TEST(KolorunElasticLimits, FewerThanMinNpFailsAfterTheElasticTimeout) {
  const auto r = run_elastic({"-np", "2", "--min-np", "2", "--elastic-timeout", "1", KOLO_ELASTIC_WORKER_PATH, "40",
                              "exit", "1", "5"});
  EXPECT_TRUE(r.exited && r.exit_code != 0) << r.out << r.err;
  EXPECT_NE(r.err.find("fewer than --min-np 2 workers for 1"), std::string::npos) << r.err;
}

TEST(KolorunElasticLimits, EveryWorkerFailingFailsTheJob) {
  const auto r = run_elastic({"-np", "2", "--min-np", "1", KOLO_ELASTIC_WORKER_PATH, "40", "exit", "0", "5", "exit",
                              "1", "5"});
  EXPECT_TRUE(r.exited && r.exit_code == 3) << r.out << r.err;
}

// Waits until rank 0 of kolo_elastic_worker has written at least `step` to
// `progress` (KOLO_TEST_PROGRESS_FILE), or the bound passes.
void wait_for_step(const fs::path& progress, int step) {
  const auto deadline = std::chrono::steady_clock::now() + time_bound(30s);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(progress);
    int done = 0;
    if (in >> done && done >= step) return;
    std::this_thread::sleep_for(20ms);
  }
}

// A discovery script that prints a hosts file, the file (first `first_hosts`),
// and rank 0's progress file, in a directory removed at the end.
struct DiscoveryFiles {
  explicit DiscoveryFiles(const std::string& name, const std::string& first_hosts)
      : dir(fs::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    fs::create_directories(dir);
    std::ofstream(hosts) << first_hosts;
    std::ofstream(script) << "#!/bin/sh\ncat " << hosts.string() << "\n";
    fs::permissions(script, fs::perms::owner_all);
  }
  ~DiscoveryFiles() { fs::remove_all(dir); }
  const fs::path dir;
  const fs::path hosts = dir / "hosts", progress = dir / "progress", script = dir / "discover.sh";
};

// Runs kolo_elastic_worker for `steps` steps on 2 workers of localhost (up to
// `max_np`); once rank 0 passed step 20 the discovery script also lists
// `added` ("127.0.0.1:N"). `env`: more variables for the workers; `faults`:
// the worker's FAULT WORKER STEP arguments. Checks that the job ended well
// with `max_np` workers trained alike.
RunResult run_with_a_host_added(const std::string& name, const std::string& added, int max_np, int steps,
                                kolo::testing::Subprocess::Environment env = {},
                                const std::vector<std::string>& faults = {}) {
  const DiscoveryFiles files(name, "localhost:2\n");
  std::thread add_host([&] {
    wait_for_step(files.progress, 20);
    std::ofstream(files.hosts, std::ios::app) << added << "\n";
  });
  env.emplace_back("KOLO_TEST_PROGRESS_FILE", files.progress.string());
  std::vector<std::string> args{"-np", "2", "--min-np", "2", "--max-np", std::to_string(max_np),
                                "--host-discovery-script", files.script.string(), KOLO_ELASTIC_WORKER_PATH,
                                std::to_string(steps)};
  args.insert(args.end(), faults.begin(), faults.end());
  const auto r = run_elastic(args, 90s, env);
  add_host.join();
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  std::set<int> workers;
  for (int w = 0; w < max_np; ++w) workers.insert(w);
  expect_finished_alike(r, workers, max_np, steps);
  return r;
}

// The reset times ("at T") of workers 0 and 1 into a job of `size`.
std::vector<long long> first_workers_resets(const RunResult& r, int size) {
  const std::regex reset("worker [01] reset at step \\d+: rank \\d of " + std::to_string(size) + " at (\\d+)");
  std::vector<long long> times;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), reset), end; it != end; ++it)
    times.push_back(std::stoll((*it)[1]));
  return times;
}

// A discovery script that adds a host (another name of this machine) brings two
// workers; the running ones reset at the same step and the newcomers take their
// state.
TEST(KolorunElasticDiscovery, NewSlotsBringWorkersThatTakeTheSurvivorsState) {
  const auto r = run_with_a_host_added("kolo-elastic", "127.0.0.1:2", 4, 300);
  // The two first workers reset at one step.
  const std::regex reset(R"(worker ([01]) reset at step (\d+): rank \d of 4)");
  std::set<std::string> steps;
  for (std::sregex_iterator it(r.err.begin(), r.err.end(), reset), end; it != end; ++it) steps.insert((*it)[2]);
  EXPECT_EQ(steps.size(), 1u) << r.err;
}

// A joiner that takes long to start (3 s here; importing torch takes 1-2) does
// not hold the others up: it is taken into the job once it waits to join, so
// the running workers reset after its init() began, not before.
TEST(KolorunElasticDiscovery, ASlowJoinerDoesNotPauseTheOthers) {
  const auto r = run_with_a_host_added("kolo-elastic-slow", "127.0.0.1:1", 3, 400, {{"KOLO_TEST_SLOW_START", "2 3000"}});
  std::smatch init;
  ASSERT_TRUE(std::regex_search(r.err, init, std::regex(R"(worker 2 calls init at (\d+))"))) << r.err;
  const auto resets = first_workers_resets(r, 3);
  EXPECT_EQ(resets.size(), 2u) << r.err;
  for (long long t : resets) EXPECT_GE(t, std::stoll(init[1])) << "a worker waited for the joiner: " << r.err;
}

// A joiner's init() returns before the job takes it in, with the place it is
// planned to have; the others train on while it builds its model (3 s here)
// and reset only once it reaches its first collective. Its plan holds, so its
// state is not reset.
TEST(KolorunElasticDiscovery, AJoinerBuildsItsModelBeforeTheOthersPause) {
  const auto r = run_with_a_host_added("kolo-elastic-model", "127.0.0.1:1", 3, 400, {{"KOLO_TEST_SLOW_MODEL", "2 3000"}});
  std::smatch planned;
  ASSERT_TRUE(std::regex_search(r.err, planned, std::regex(R"(worker 2 planned as rank (\d+) of (\d+) at (\d+))")))
      << r.err;
  EXPECT_EQ(planned[1], "2") << r.err;
  EXPECT_EQ(planned[2], "3") << r.err;
  const auto resets = first_workers_resets(r, 3);
  EXPECT_EQ(resets.size(), 2u) << r.err;
  for (long long t : resets)
    EXPECT_GE(t, std::stoll(planned[3]) + 3000) << "a worker waited for the joiner's model: " << r.err;
  EXPECT_EQ(r.err.find("worker 2 reset"), std::string::npos) << "the joiner's plan held: " << r.err;
  // run() let it prepare for its first sync before it was taken in; no one else.
  EXPECT_NE(r.err.find("worker 2 prepares to join, awaiting admission"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("prepares to join"), r.err.rfind("prepares to join")) << r.err;
}

// Two joiners at once: each planned its place without the other, so the later
// one (worker 3, rank 3 of 4 in the end) finds its plan wrong and resets its
// state when it is taken in, before its first sync.
TEST(KolorunElasticDiscovery, AJoinerWhosePlanFailsResetsBeforeItsFirstSync) {
  const auto r = run_with_a_host_added("kolo-elastic-plan", "127.0.0.1:2", 4, 400, {{"KOLO_TEST_SLOW_MODEL", "2 1500"}});
  EXPECT_NE(r.err.find("worker 3 planned as rank 2 of 3"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(worker 3 reset at step \d+: rank 3 of 4)"))) << r.err;
}

// A joiner that arrives while the others broadcast the state to an earlier one
// (Horovod's joiner stuck in the broadcast): worker 2 is taken in, worker 0
// sleeps 3 s inside that sync, and worker 3 says it is ready 1.5 s into it.
// The sync ends, and worker 3 is taken in at the next commit.
TEST(KolorunElasticDiscovery, AJoinerArrivingDuringTheStateBroadcastIsTakenInAfterIt) {
  const auto r = run_with_a_host_added("kolo-elastic-late", "127.0.0.1:2", 4, 400,
                                       {{"KOLO_TEST_SLOW_MODEL", "2 0 1500"}}, {"sync-sleep", "0", "20"});
  EXPECT_NE(r.err.find("fault: sleep"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(worker 0 reset at step \d+: rank 0 of 3)"))) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(worker 0 reset at step \d+: rank 0 of 4)"))) << r.err;
}

// A joiner whose program fails before its first collective (an exception while
// it builds its model) was never taken in: the others never re-form for it
// and finish as they were.
TEST(KolorunElasticDiscovery, AJoinerFailingBeforeItIsTakenInLeavesTheOthersAlone) {
  const DiscoveryFiles files("kolo-elastic-fail", "localhost:2\n");
  std::thread add_host([&] {
    wait_for_step(files.progress, 20);
    std::ofstream(files.hosts, std::ios::app) << "127.0.0.1:1\n";
  });
  const auto r = run_elastic({"-np", "2", "--min-np", "2", "--max-np", "3", "--host-discovery-script",
                              files.script.string(), KOLO_ELASTIC_WORKER_PATH, "300"},
                             90s,
                             {{"KOLO_TEST_PROGRESS_FILE", files.progress.string()},
                              {"KOLO_TEST_FAIL_BEFORE_RUN", "2"}});
  add_host.join();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  EXPECT_NE(r.err.find("worker 2 failed before run()"), std::string::npos) << r.err;
  expect_finished_alike(r, {0, 1}, 2, 300);
  EXPECT_EQ(r.err.find(" reset at step"), std::string::npos) << "the others re-formed: " << r.err;
}

// Horovod's scenario of hosts added then removed: sizes 2, 4, 2. The first host
// leaves the discovery script's list, its workers go, and a worker that joined
// on the second host becomes rank 0 with the state it took from the first.
TEST(KolorunElasticDiscovery, HostsAddedThenRemovedAndTheJoinerBecomesRankZero) {
  const DiscoveryFiles files("kolo-elastic-rm", "localhost:2\n");
  std::thread change_hosts([&] {
    wait_for_step(files.progress, 20);
    std::ofstream(files.hosts, std::ios::app) << "127.0.0.1:2\n";
    // Rank 0 keeps writing: past step 60 the job of 4 has run a while.
    wait_for_step(files.progress, 120);
    std::ofstream(files.hosts, std::ios::trunc) << "127.0.0.1:2\n";
  });
  const auto r = run_elastic({"-np", "2", "--min-np", "2", "--max-np", "4", "--host-discovery-script",
                              files.script.string(), KOLO_ELASTIC_WORKER_PATH, "400"},
                             120s, {{"KOLO_TEST_PROGRESS_FILE", files.progress.string()}});
  change_hosts.join();
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {2, 3}, 2, 400);
  const auto done = finished_workers(r.out);
  ASSERT_TRUE(done.count(2)) << r.out;
  EXPECT_EQ(done.at(2).rank, 0) << r.out;
  EXPECT_NE(r.err.find("is gone from the discovery script's list"), std::string::npos) << r.err;
}

// A failed worker's host is back after its cooldown and takes a new worker.
TEST(KolorunElasticLimits, AnExcludedHostIsBackAfterItsCooldown) {
  const auto r = run_elastic({"-np", "3", "--min-np", "2", "-H", "localhost:2,127.0.0.1:1", "--blacklist-cooldown-range",
                              "0.5", "0.5", KOLO_ELASTIC_WORKER_PATH, "250", "exit", "2", "10"});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 1, 3}, 3, 250);
  EXPECT_NE(r.err.find("host 127.0.0.1 is back after its cooldown"), std::string::npos) << r.err;
}

// A discovery script that fails after its first run is retried, said once per
// failure, and the job goes on with the hosts it printed last.
TEST(KolorunElasticDiscovery, LaterScriptFailuresKeepTheLastHosts) {
  const fs::path dir = fs::temp_directory_path() / ("kolo-elastic-flaky-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path script = dir / "discover.sh", runs = dir / "runs";
  std::ofstream(script) << "#!/bin/sh\nif [ -e " << runs.string() << " ]; then echo 'garbage here'; exit 0; fi\n"
                        << "touch " << runs.string() << "\necho localhost:2\n";
  fs::permissions(script, fs::perms::owner_all);
  const auto r = run_elastic({"-np", "2", "--min-np", "2", "--host-discovery-script", script.string(),
                              KOLO_ELASTIC_WORKER_PATH, "120"});
  fs::remove_all(dir);
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.out << r.err;
  expect_finished_alike(r, {0, 1}, 2, 120);
  EXPECT_NE(r.err.find("keeping the hosts it printed last"), std::string::npos) << r.err;
}

// SIGTERM to kolorun ends an elastic job as any other: every worker stops, and
// kolorun exits 128+15.
TEST(KolorunElasticUsage, SigtermStopsEveryWorker) {
  kolo::testing::KolorunProcess job(KOLORUN_PATH, {"-np", "3", "--min-np", "2", KOLO_ELASTIC_WORKER_PATH, "100000"});
  std::this_thread::sleep_for(time_bound(1500ms));
  ::kill(job.pid(), SIGTERM);
  const auto r = job.wait(time_bound(20s));
  EXPECT_TRUE(r.exited && r.exit_code == 128 + SIGTERM) << r.out << r.err;
  EXPECT_NE(r.err.find("received SIGTERM; stopping every rank"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("elastic: generation"), std::string::npos) << r.err;
}

TEST(KolorunElasticDiscovery, AScriptThatFailsAtTheStartFailsTheJob) {
  const auto r = run_elastic({"-np", "2", "--host-discovery-script", "exit 3", KOLO_ELASTIC_WORKER_PATH, "5"}, 20s);
  EXPECT_TRUE(r.exited && r.exit_code != 0) << r.out << r.err;
  EXPECT_NE(r.err.find("the host discovery script 'exit 3' exited with code 3"), std::string::npos) << r.err;
  const auto garbage = run_elastic({"-np", "2", "--host-discovery-script", "echo 'a b:x'", KOLO_ELASTIC_WORKER_PATH, "5"},
                                   20s);
  EXPECT_TRUE(garbage.exited && garbage.exit_code != 0) << garbage.err;
  EXPECT_NE(garbage.err.find("discovery script's output"), std::string::npos) << garbage.err;
}

TEST(KolorunElasticUsage, BadCombinationsAreRefused) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"-np", "2", "--min-np", "3", "true"}, "--min-np 3 is above -np 2"},
      {{"-np", "4", "--max-np", "3", "true"}, "--max-np 3 is below -np 4"},
      {{"-np", "2", "--reset-limit", "1", "true"}, "need an elastic job"},
      {{"-np", "2", "--min-np", "1", "--mpi", "true"}, "cannot be handed to mpirun"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "true"}, "needs a non-negative number of seconds"},
      {{"-np", "2", "--min-np", "1", "--blacklist-cooldown-range", "5", "2", "true"}, "is above HIGH"},
      {{"-np", "2", "--min-np", "1", "-H", "a b:2", "true"}, "may not hold white space"},
  };
  for (const auto& c : cases) {
    const auto r = run_elastic(c.args, 10s);
    EXPECT_TRUE(r.exited && r.exit_code == 2) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
  }
}

}  // namespace
