// The short scheduler slice a rank asks for while it sleeps waiting for a peer
// (common/wake_slice.h): held exactly while asleep, the thread's own slice (the
// kernel's default or one the program chose) back afterwards, and what the
// shared-memory channel does while it waits.
#include "common/wake_slice.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "comm/shm/shm_communicator.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo {
namespace {

using namespace std::chrono_literals;

// EEVDF keeps a chosen slice from Linux 6.12; before, the kernel ignores it.
bool kernel_keeps_slices() {
  utsname u{};
  int major = 0, minor = 0;
  return ::uname(&u) == 0 && std::sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
         (major > 6 || (major == 6 && minor >= 12));
}

// The slice a program chose for its thread, through sched_setattr(2) itself.
void choose_slice(std::uint64_t ns) {
  struct {
    std::uint32_t size, policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime, deadline, period;
    std::uint32_t util_min, util_max;
  } attr{};
  attr.size = sizeof attr;
  attr.runtime = ns;
  ASSERT_EQ(::syscall(SYS_sched_setattr, 0, &attr, 0), 0);
}

TEST(WakeSlice, ShortWhileAsleepAndTheThreadsOwnAfter) {
  if (!kernel_keeps_slices()) GTEST_SKIP() << "the kernel keeps no chosen slice before Linux 6.12";
  std::thread([] {
    const std::uint64_t own = slice_ns_of_thread();
    ASSERT_GT(own, 0u);
    {
      ShortSliceWhileAsleep asleep(100us);
      EXPECT_EQ(slice_ns_of_thread(), 100'000u);
    }
    EXPECT_EQ(slice_ns_of_thread(), own);
    {
      ShortSliceWhileAsleep off(0us);
      EXPECT_EQ(slice_ns_of_thread(), own);
    }
    // A slice the program chose is the one restored.
    choose_slice(5'000'000);
    {
      ShortSliceWhileAsleep asleep(100us);
      EXPECT_EQ(slice_ns_of_thread(), 100'000u);
    }
    EXPECT_EQ(slice_ns_of_thread(), 5'000'000u);
  }).join();
}

TEST(WakeSlice, InsideASpanTheShortSliceHoldsUntilTheSpanEnds) {
  if (!kernel_keeps_slices()) GTEST_SKIP() << "the kernel keeps no chosen slice before Linux 6.12";
  std::thread([] {
    const std::uint64_t own = slice_ns_of_thread();
    {
      ShortSliceSpan span;
      EXPECT_EQ(slice_ns_of_thread(), own);  // no wait, no change
      {
        ShortSliceSpan inner;
        { ShortSliceWhileAsleep asleep(100us); }
      }
      EXPECT_EQ(slice_ns_of_thread(), 100'000u);  // the copies after a wait run short too
      { ShortSliceWhileAsleep asleep(100us); }
      EXPECT_EQ(slice_ns_of_thread(), 100'000u);
    }
    EXPECT_EQ(slice_ns_of_thread(), own);
  }).join();
}

// Rank 1 waits in a broadcast for a rank 0 that comes late; a watcher in rank 1
// reads the waiting thread's slice meanwhile.
void watch_the_wait(std::chrono::microseconds wake_slice, bool expect_short) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  testing::run_ranks(
      2,
      [=](int rank) {
        comm::CommunicatorOptions comm_options;
        comm_options.wake_slice = wake_slice;
        auto comm = comm::make_shm_communicator(rank, 2, std::getenv("KOLO_JOB_ID"), comm_options);
        std::vector<int> data(16, rank == 0 ? 7 : 0);
        if (rank == 0) {
          std::this_thread::sleep_for(300ms);
          comm->broadcast(data.data(), data.size() * sizeof(int), 0);
          return;
        }
        const int tid = static_cast<int>(::syscall(SYS_gettid));
        const std::uint64_t own = slice_ns_of_thread(tid);
        std::atomic<bool> done{false};
        std::atomic<std::uint64_t> shortest{own};
        std::thread watcher([&] {
          while (!done.load()) {
            const std::uint64_t now = slice_ns_of_thread(tid);
            if (now < shortest.load()) shortest.store(now);
            std::this_thread::sleep_for(1ms);
          }
        });
        comm->broadcast(data.data(), data.size() * sizeof(int), 0);
        done.store(true);
        watcher.join();
        EXPECT_EQ(data.front(), 7);
        EXPECT_EQ(shortest.load(), expect_short ? 100'000u : own);
        EXPECT_EQ(slice_ns_of_thread(tid), own);
      },
      options);
}

TEST(WakeSlice, ShmWaiterAsleepHoldsTheShortSlice) {
  if (!kernel_keeps_slices()) GTEST_SKIP() << "the kernel keeps no chosen slice before Linux 6.12";
  watch_the_wait(100us, true);
}

TEST(WakeSlice, ZeroLeavesTheKernelsSlice) { watch_the_wait(0us, false); }

}  // namespace
}  // namespace kolo

namespace kolo {
namespace {

// The slices of this process's threads other than the caller's, by thread id.
std::vector<std::uint64_t> slices_of_other_threads() {
  std::vector<std::uint64_t> slices;
  const int self = static_cast<int>(::syscall(SYS_gettid));
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    const int tid = std::atoi(entry.path().filename().c_str());
    if (tid != self) slices.push_back(slice_ns_of_thread(tid));
  }
  return slices;
}

// Through the public API: a caller whose allreduce waits for a late peer holds
// the short slice while it waits, and every thread has its own back once the
// operation is done.
TEST(WakeSlice, ACallerHoldsItWhileItWaitsAndEveryThreadGivesItBack) {
  if (!kernel_keeps_slices()) GTEST_SKIP() << "the kernel keeps no chosen slice before Linux 6.12";
  testing::run_ranks(
      2,
      [](int rank) {
        kolo::init();
        float x = 1.0f;
        kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "first"});
        const std::uint64_t own = slice_ns_of_thread();
        EXPECT_NE(own, 100'000u);
        if (rank == 0) std::this_thread::sleep_for(300ms);
        std::atomic<bool> done{false}, seen_short{false};
        const int caller = static_cast<int>(::syscall(SYS_gettid));
        std::thread watcher([&] {
          while (!done.load()) {
            if (slice_ns_of_thread(caller) == 100'000u) seen_short.store(true);
            std::this_thread::sleep_for(1ms);
          }
        });
        kolo::allreduce(make_tensor(&x, 1), {.op = ReduceOp::Sum, .name = "late"});
        done.store(true);
        watcher.join();
        EXPECT_EQ(x, 4.0f);
        if (rank == 1) EXPECT_TRUE(seen_short.load());
        EXPECT_EQ(slice_ns_of_thread(), own);
        // The engine's thread ends its step right after the operation completes.
        auto none_short = [] {
          const auto slices = slices_of_other_threads();
          return std::count(slices.begin(), slices.end(), 100'000u) == 0;
        };
        const auto deadline = std::chrono::steady_clock::now() + 5s;
        while (!none_short() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
        EXPECT_TRUE(none_short());
        kolo::shutdown();
      },
      {.timeout = 60s});
}

}  // namespace
}  // namespace kolo
