// When a thread polling for a peer yields its CPU (common/spin_policy.h): only a
// background thread (the engine's), and only while no caller of the process
// waits for an operation, so that a computation beside it runs, while a caller
// waiting for the result gets it without a busy process's time slice first.
#include "common/spin_policy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

TEST(SpinPolicy, OnlyABackgroundThreadYieldsAndOnlyWhileNoCallerWaits) {
  EXPECT_FALSE(yield_to_computation()) << "a caller's own thread";
  bool alone = false, beside_a_waiter = true, after = false;
  std::thread([&] {
    mark_background_thread();
    alone = yield_to_computation();
    {
      const CallerWaits waiting;
      beside_a_waiter = yield_to_computation();
    }
    after = yield_to_computation();
  }).join();
  EXPECT_TRUE(alone);
  EXPECT_FALSE(beside_a_waiter);
  EXPECT_TRUE(after);
}

TEST(SpinPolicy, ACallerWaitingForItsOperationStopsTheYield) {
  run_ranks(2, [](int rank) {
    kolo::init();
    // Rank 1 comes late: rank 0 waits for its operation meanwhile.
    if (rank == 1) std::this_thread::sleep_for(500ms);
    float value = 1.0f;
    Handle pending = kolo::allreduce_async(make_tensor(&value, 1), {.op = ReduceOp::Sum});
    std::atomic<bool> done{false};
    bool during = true, after = false;
    std::thread watcher([&] {
      mark_background_thread();
      std::this_thread::sleep_for(200ms);
      during = yield_to_computation();
      while (!done.load()) std::this_thread::sleep_for(1ms);
      after = yield_to_computation();
    });
    pending.wait();
    done.store(true);
    watcher.join();
    EXPECT_EQ(value, 2.0f);
    if (rank == 0) EXPECT_FALSE(during) << "rank 0 waited for its allreduce";
    EXPECT_TRUE(after);
    kolo::shutdown();
  });
}

}  // namespace
}  // namespace kolo::testing
