// A process forked after kolo::init() (a DataLoader worker, a multiprocessing
// pool, system()) inherits no kolo session: it exits at once, every kolo call in
// it fails with a clear error, and the parents' job never hears of it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>

#include "harness/multiprocess.h"
#include "harness/subprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Forks a child that runs `body` and leaves with exit(), the ordinary way out
// (kolo's atexit handler and the static destructors run). Returns its exit code,
// or -1 when it did not exit within `limit` (it is then killed) or was killed.
int run_child(const std::function<int()>& body, std::chrono::milliseconds limit = 10s) {
  const pid_t pid = ::fork();
  if (pid == 0) std::exit(body());
  const auto deadline = Clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      print_stacks_of(pid, "the child that did not exit");  // a lock the fork left held
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Exit codes of a child's checks: which one failed.
enum ChildResult { kOk = 0, kNoError = 10, kWrongError, kVagueMessage, kStillInitialized, kRankWorked, kInitWorked };

// A kolo call in the child must throw `Expected` saying that the process was forked.
template <class Expected, class Call>
int expect_forked_error(Call call) {
  try {
    call();
    return kNoError;
  } catch (const Expected& e) {
    return std::string(e.what()).find("forked") == std::string::npos ? kVagueMessage : kOk;
  } catch (...) {
    return kWrongError;
  }
}

int allreduce_in_child() {
  float x = 1.0f;
  if (int r = expect_forked_error<ShutdownError>([&] { kolo::allreduce(make_tensor(&x, 1), {.name = "child"}); }))
    return r;
  if (kolo::is_initialized()) return kStillInitialized;
  if (expect_forked_error<ShutdownError>([] { kolo::rank(); })) return kRankWorked;
  if (expect_forked_error<InvalidArgumentError>([] { kolo::init(); })) return kInitWorked;
  kolo::shutdown();  // nothing to stop, and nothing of the parent's touched
  return kOk;
}

void expect_job_works(const std::string& tag) {
  for (int i = 0; i < 3; ++i) {
    float x = 1.0f;
    kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = tag + std::to_string(i)});
    EXPECT_EQ(x, static_cast<float>(kolo::size())) << tag;
  }
}

// The child used to wait forever in the engine's destructor for a thread it
// does not have, even in a job of one.
TEST(Fork, ChildOfAnInitializedProcessExitsAtOnce) {
  for (int size : {1, 2}) {
    run_ranks(size, [](int) {
      kolo::init();
      expect_job_works("before");
      const auto start = Clock::now();
      EXPECT_EQ(run_child([] { return 0; }), 0);
      EXPECT_LT(Clock::now() - start, 3s);
      expect_job_works("after");
      kolo::shutdown();
    }, {.timeout = 60s});
  }
}

// Children of two ranks calling a collective at the same time used to pair up
// through the inherited communicator and break the parents' job.
TEST(Fork, CollectivesInChildrenFailAndTheParentsJobGoesOn) {
  run_ranks(2, [](int) {
    kolo::init();
    expect_job_works("before");
    EXPECT_EQ(run_child(allreduce_in_child), kOk);
    expect_job_works("after");
    kolo::shutdown();
  }, {.timeout = 60s});
}

// A handle the parent holds for an unfinished operation fails in the child
// instead of waiting for the parent's engine; in the parent it completes.
TEST(Fork, UnfinishedHandleFailsInTheChild) {
  run_ranks(2, [](int rank) {
    kolo::init();
    float x = 1.0f, y = 1.0f;
    if (rank == 0) {
      // Rank 1 submits "pending" only after "barrier", which rank 0 reaches
      // after its child is done: the operation is unfinished at fork().
      Handle pending = kolo::allreduce_async(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "pending"});
      // The engine thread's first cycles for "pending" allocate; forking while
      // they run hands the child an allocator lock held by a thread it does not
      // have. glibc's malloc releases its locks in the child, but the
      // sanitizers' allocators (GCC 12) do not, and there the child hung in its
      // first free (one run in four under ThreadSanitizer). The engine is idle
      // once those cycles are done; the operation stays unfinished.
      std::this_thread::sleep_for(200ms);
      EXPECT_EQ(run_child([&] {
        if (int r = expect_forked_error<ShutdownError>([&] { pending.wait(); })) return r;
        return expect_forked_error<ShutdownError>([&] { pending.wait(100ms); });
      }), kOk);
      kolo::allreduce(make_tensor(&y, 1), {.op = ReduceOp::Sum, .name = "barrier"});
      pending.wait();
    } else {
      kolo::allreduce(make_tensor(&y, 1), {.op = ReduceOp::Sum, .name = "barrier"});
      kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "pending"});
    }
    EXPECT_EQ(x, 2.0f);
    EXPECT_EQ(y, 2.0f);
    kolo::shutdown();
  }, {.timeout = 60s});
}

// A child forked after shutdown() may start a session of its own (the parent's
// is over): fork handling concerns a running session only.
TEST(Fork, ChildAfterShutdownIsAnOrdinaryProcess) {
  run_ranks(1, [](int) {
    kolo::init();
    kolo::shutdown();
    EXPECT_EQ(run_child([] {
      kolo::init();
      float x = 2.0f;
      kolo::allreduce(make_tensor(&x, 1), {.name = "own"});
      kolo::shutdown();
      return x == 2.0f ? 0 : 1;
    }), 0);
  }, {.timeout = 60s, .use_store = false});
}

}  // namespace
}  // namespace kolo::testing
