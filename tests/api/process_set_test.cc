// Process sets: subsets of the job that negotiate and run collectives among
// themselves, concurrently with other sets, over shared memory and over TCP.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "harness/fake_hosts.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

float summed(const ProcessSet& set, float value, const std::string& name) {
  kolo::allreduce(make_tensor(&value, 1), {.op = ReduceOp::Sum, .name = name, .process_set = set});
  return value;
}

// Four ranks: {0, 1} and {2, 3} run their collectives at the same time, {3} is a
// set of one, {0, 2, 3} overlaps both; every result is counted within its set.
void disjoint_and_overlapping_sets(int rank) {
  kolo::init();
  const ProcessSet low = add_process_set({1, 0});  // any order
  const ProcessSet high = add_process_set({2, 3});
  const ProcessSet alone = add_process_set({3});
  const ProcessSet odd = add_process_set({0, 2, 3});
  EXPECT_EQ(process_set_ranks(low), (std::vector<int>{0, 1}));
  EXPECT_EQ(process_set_size(odd), 3);
  EXPECT_EQ(process_set_rank(odd), rank == 0 ? 0 : rank == 1 ? -1 : rank - 1);
  EXPECT_EQ(process_set_rank(global_process_set), rank);

  // Disjoint sets concurrently: each member sums its set's ranks many times over.
  const ProcessSet mine = rank < 2 ? low : high;
  const float expected = rank < 2 ? 1.0f : 5.0f;
  for (int i = 0; i < 200; ++i) EXPECT_EQ(summed(mine, static_cast<float>(rank), "disjoint"), expected) << i;

  // A broadcast's root is a job rank (as in Horovod); allgather rows come in the
  // set's order. A root outside the set is refused on every member alike.
  if (rank != 1) {
    std::vector<std::int32_t> v{rank, rank};
    kolo::broadcast(Tensor{v.data(), DataType::Int32, {2}}, 3, {.name = "bcast", .process_set = odd});
    EXPECT_EQ(v, (std::vector<std::int32_t>{3, 3}));
    try {
      kolo::broadcast(Tensor{v.data(), DataType::Int32, {2}}, 1, {.name = "bcast.outside", .process_set = odd});
      ADD_FAILURE() << "a root outside the set was taken";
    } catch (const kolo::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("Invalid root rank 1 for broadcast of 'bcast.outside': the rank is not a "
                                           "member of the process set"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(v, (std::vector<std::int32_t>{3, 3}));
    std::int64_t me = rank;
    Buffer all = kolo::allgather(Tensor{&me, DataType::Int64, {1}}, {.name = "gather", .process_set = odd});
    ASSERT_EQ(all.shape(), Shape{3});
    EXPECT_EQ(std::vector<std::int64_t>(all.as<std::int64_t>(), all.as<std::int64_t>() + 3),
              (std::vector<std::int64_t>{0, 2, 3}));
    kolo::barrier({.name = "odd.barrier", .process_set = odd});
  } else {
    // Outside the set: a clear error on this rank alone.
    float x = 1.0f;
    try {
      kolo::allreduce(make_tensor(&x, 1), {.name = "outside", .process_set = odd});
      ADD_FAILURE() << "rank 1 is not in {0, 2, 3}";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("not in process set"), std::string::npos) << e.what();
    }
  }
  if (rank == 3) EXPECT_EQ(summed(alone, 7.0f, "alone"), 7.0f);

  // Asynchronous operations in two sets at once on one rank.
  if (rank == 0 || rank == 2 || rank == 3) {
    float a = 1.0f, b = 2.0f;
    Handle h1 = kolo::allreduce_async(make_tensor(&a, 1), {.op = ReduceOp::Sum, .name = "a", .process_set = odd});
    Handle h2 = kolo::allreduce_async(make_tensor(&b, 1), {.op = ReduceOp::Sum, .name = "b", .process_set = mine});
    h1.wait();
    h2.wait();
    EXPECT_EQ(a, 3.0f);
    EXPECT_EQ(b, 4.0f);
  } else {
    float b = 2.0f;
    kolo::allreduce(make_tensor(&b, 1), {.op = ReduceOp::Sum, .name = "b", .process_set = low});
    EXPECT_EQ(b, 4.0f);
  }

  // The global set still works beside them, and removed sets are gone.
  EXPECT_EQ(summed(global_process_set, 1.0f, "global"), 4.0f);
  remove_process_set(high);
  remove_process_set(alone);
  if (rank >= 2) {
    float x = 1.0f;
    EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1), {.name = "removed", .process_set = high}), InvalidArgumentError);
  }
  // A set with the same ranks may be added again.
  const ProcessSet again = add_process_set({2, 3});
  if (rank >= 2) EXPECT_EQ(summed(again, 1.0f, "again"), 2.0f);
  EXPECT_THROW(remove_process_set(global_process_set), InvalidArgumentError);
  kolo::shutdown();
}

TEST(ProcessSets, DisjointSetsRunConcurrentlyOverSharedMemory) { run_ranks(4, disjoint_and_overlapping_sets); }

TEST(ProcessSets, DisjointSetsRunConcurrentlyOverTcp) {
  run_ranks(4, disjoint_and_overlapping_sets, {.env = {{"KOLO_BACKEND", "tcp"}}});
}

TEST(ProcessSets, DisjointSetsRunConcurrentlyOverGloo) {
  run_ranks(4, disjoint_and_overlapping_sets, {.env = {{"KOLO_BACKEND", "gloo"}}});
}

// Two fake hosts of two ranks: {0, 1} and {2, 3} each share a host (shared
// memory), {0, 2, 3} spans both (TCP), the world is hierarchical.
TEST(ProcessSets, SetsWithinAndAcrossHostsRunConcurrently) {
  run_ranks(4, [](int rank) {
    place_on_fake_host(rank, 2, 2);
    disjoint_and_overlapping_sets(rank);
  }, {.env = {{"KOLO_HOST_ADDR", "127.0.0.1"}}});  // fake hosts share loopback
}

// Every rank gets the same error for a bad set, and the job goes on.
TEST(ProcessSets, BadSetsFailOnEveryRank) {
  run_ranks(3, [](int rank) {
    kolo::init();
    std::string message;
    try {
      add_process_set(rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{0, 2});
      ADD_FAILURE() << "ranks disagreed";
    } catch (const MismatchError& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("rank 0 gave [0, 1], rank 1 gave [0, 2]"), std::string::npos) << message;
    EXPECT_THROW(add_process_set({0, 0}), InvalidArgumentError);
    EXPECT_THROW(add_process_set({0, 3}), InvalidArgumentError);
    EXPECT_THROW(add_process_set({}), InvalidArgumentError);
    const ProcessSet pair = add_process_set({0, 1});
    EXPECT_THROW(add_process_set({1, 0}), InvalidArgumentError);  // already exists
    EXPECT_THROW(remove_process_set(ProcessSet{99}), InvalidArgumentError);
    if (rank < 2) EXPECT_EQ(summed(pair, 1.0f, "pair"), 2.0f);
    EXPECT_EQ(summed(global_process_set, 1.0f, "job"), 3.0f);
    kolo::shutdown();
  });
}

// A mismatch inside a set reaches every member of the set.
TEST(ProcessSets, MismatchInsideASetReachesEveryMember) {
  run_ranks(3, [](int rank) {
    kolo::init();
    const ProcessSet tail = add_process_set({1, 2});
    if (rank > 0) {
      std::vector<float> v(static_cast<std::size_t>(rank), 1.0f);
      EXPECT_THROW(kolo::allreduce(Tensor{v.data(), DataType::Float32, {rank}}, {.name = "m", .process_set = tail}),
                   MismatchError);
      EXPECT_EQ(summed(tail, 1.0f, "after"), 2.0f);
    }
    kolo::shutdown();
  });
}

// Removing a set fails what is still pending in it, saying so (no rank shut kolo down).
TEST(ProcessSets, RemovingASetFailsItsPendingOperationsSayingWhy) {
  run_ranks(2, [](int rank) {
    kolo::init();
    const ProcessSet both = add_process_set({0, 1});
    float x = 1.0f;
    Handle pending;
    if (rank == 0) pending = kolo::allreduce_async(make_tensor(&x, 1), {.name = "never", .process_set = both});
    remove_process_set(both);
    if (rank == 0) {
      try {
        pending.wait();
        ADD_FAILURE() << "the pending operation ran";
      } catch (const ShutdownError& e) {
        EXPECT_NE(std::string(e.what()).find("was removed (remove_process_set) while the operation was pending"),
                  std::string::npos)
            << e.what();
      }
    }
    kolo::shutdown();
  });
}

}  // namespace
}  // namespace kolo::testing
