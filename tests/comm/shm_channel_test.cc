// The shared-memory channel's view of where its ranks run: whether they share
// CPUs decides how a waiter waits (spin on its own core, or yield to a peer that
// may be queued behind it). Ranks bound to their own cores each see one CPU; the
// channel must look at all ranks' masks together, not at its own.
#include "comm/shm/shm_channel.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "harness/multiprocess.h"

namespace kolo::comm::shm {
namespace {

using namespace std::chrono_literals;

bool has_cpus_0_and_1() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return ::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
}

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
}

// In each of two ranks: pinned to cpu_of(rank), joins the job's segment and
// reports whether the channel thinks the ranks share CPUs.
void expect_sharing(int (*cpu_of)(int), bool expected) {
  testing::SpawnOptions options;
  options.use_store = false;
  options.timeout = 60s;
  testing::run_ranks(
      2,
      [cpu_of, expected](int rank) {
        pin_to(cpu_of(rank));
        ShmChannel channel(join_segment(segment_name(std::getenv("KOLO_JOB_ID")), rank, 2,
                                        SegmentConfig{.slot_bytes = 4096, .small_bytes = 1024}, 10s),
                           rank, CommunicatorOptions{});
        EXPECT_EQ(channel.ranks_share_cpus(), expected) << "rank " << rank;
      },
      options);
}

TEST(ShmChannel, RanksBoundToTheirOwnCpusDoNotShare) {
  if (!has_cpus_0_and_1()) GTEST_SKIP() << "needs CPUs 0 and 1";
  expect_sharing([](int rank) { return rank; }, false);
}

TEST(ShmChannel, RanksBoundToOneCpuShareIt) {
  if (!has_cpus_0_and_1()) GTEST_SKIP() << "needs CPUs 0 and 1";
  expect_sharing([](int) { return 0; }, true);
}

}  // namespace
}  // namespace kolo::comm::shm
