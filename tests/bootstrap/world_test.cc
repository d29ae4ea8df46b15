// init(ranks): worlds made of some of the job's ranks (Horovod's init(comm=...)),
// their topology, and disjoint worlds running side by side over shared memory and TCP.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "bootstrap/world.h"
#include "common/job_names.h"
#include "harness/fake_hosts.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

using bootstrap::check_world_ranks;
using bootstrap::world_name;
using bootstrap::world_topology;

Topology job_of(int rank, int size) {
  Topology t;
  t.rank = rank;
  t.size = size;
  t.job_id = "job";
  return t;
}

std::string refusal(const Topology& job, const std::vector<int>& ranks) {
  try {
    check_world_ranks(job, ranks);
  } catch (const InvalidArgumentError& e) {
    return e.what();
  }
  return "";
}

TEST(WorldRanks, BadListsAreRefusedWithTheReason) {
  const Topology job = job_of(1, 4);
  EXPECT_EQ(refusal(job, {}), "kolo::init: the list of ranks is empty");
  EXPECT_NE(refusal(job, {1, 4}).find("include 4, which is not a rank of this job of 4"), std::string::npos);
  EXPECT_NE(refusal(job, {1, -1}).find("include -1"), std::string::npos);
  EXPECT_NE(refusal(job, {1, 2, 1}).find("list rank 1 twice"), std::string::npos);
  EXPECT_NE(refusal(job, {0, 2}).find("do not include this process, rank 1 of the job"), std::string::npos);
  EXPECT_EQ(refusal(job, {3, 1}), "");
}

TEST(WorldRanks, TheWholeJobInOrderIsTheJob) {
  EXPECT_TRUE(bootstrap::is_whole_job({0, 1, 2}, 3));
  EXPECT_FALSE(bootstrap::is_whole_job({1, 0, 2}, 3));
  EXPECT_FALSE(bootstrap::is_whole_job({0, 1}, 3));
}

TEST(WorldRanks, EachListHasItsOwnName) {
  EXPECT_EQ(world_name({0, 2}), world_name({0, 2}));
  EXPECT_NE(world_name({0, 2}), world_name({2, 0}));
  EXPECT_NE(world_name({0, 2}), world_name({0, 2, 3}));
  EXPECT_EQ(world_name({5}).size(), 17u);
}

TEST(WorldRanks, LocalRanksFollowTheHostsInTheListsOrder) {
  // Job rank 4 of 6 on three hosts (two ranks each), in the world [5, 0, 4, 1]:
  // job ranks 5 and 4 share host 2, which the list meets first.
  Topology job = job_of(4, 6);
  job.store_addr = "127.0.0.1:1";
  job.secret = "s";
  const Topology t = world_topology(job, {5, 0, 4, 1}, {2, 0, 2, 0});
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.size, 4);
  EXPECT_EQ(t.cross_rank, 0);
  EXPECT_EQ(t.cross_size, 2);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_size, 2);
  EXPECT_EQ(t.job_ranks, (std::vector<int>{5, 0, 4, 1}));
  EXPECT_FALSE(t.whole_job());
  EXPECT_EQ(t.job_id, "job-" + world_name({5, 0, 4, 1}));
  EXPECT_EQ(bootstrap::job_id_of(t), "job");
  EXPECT_EQ(bootstrap::job_id_of(job), "job");
  EXPECT_EQ(t.store_addr, job.store_addr);
  EXPECT_EQ(t.secret, job.secret);
}

std::int64_t sum_of(std::int64_t value, const std::string& name) {
  kolo::allreduce(Tensor{&value, DataType::Int64, {1}}, {.op = ReduceOp::Sum, .name = name});
  return value;
}

// Six ranks on three simulated hosts: the world [5, 0, 4, 1] spans hosts 2 and 0
// out of host-by-host order (flat TCP), the world [3, 2] is host 1 (shared
// memory); both run at once, then the whole job meets again.
TEST(Worlds, DisjointWorldsRunSideBySideThenTheJobMeetsAgain) {
  SpawnOptions options;
  options.env["KOLO_HOST_ADDR"] = "127.0.0.1";  // the simulated hosts are this one
  std::string job_id, secret;
  options.on_started = [&](const StartedJob& job) {
    job_id = job.job_id;
    secret = job.secret;
  };
  run_ranks(6, [](int rank) {
    place_on_fake_host(rank, 2, 3);
    const std::vector<int> a{5, 0, 4, 1}, b{3, 2};
    const std::vector<int>& mine = rank == 2 || rank == 3 ? b : a;
    kolo::init(mine);
    const int index = static_cast<int>(std::find(mine.begin(), mine.end(), rank) - mine.begin());
    EXPECT_EQ(kolo::rank(), index);
    EXPECT_EQ(kolo::size(), static_cast<int>(mine.size()));
    EXPECT_EQ(kolo::backend(), &mine == &b ? "shm" : "tcp");
    const std::int64_t expected = std::accumulate(mine.begin(), mine.end(), std::int64_t{0});
    for (int i = 0; i < 30; ++i) EXPECT_EQ(sum_of(rank, "world.sum"), expected) << i;
    std::int64_t me = rank;
    Buffer all = kolo::allgather(Tensor{&me, DataType::Int64, {1}}, {.name = "world.gather"});
    EXPECT_EQ(std::vector<std::int64_t>(all.as<std::int64_t>(), all.as<std::int64_t>() + mine.size()),
              std::vector<std::int64_t>(mine.begin(), mine.end()));
    kolo::shutdown();
    kolo::init();
    EXPECT_EQ(kolo::size(), 6);
    EXPECT_EQ(sum_of(1, "job.sum"), 6);
    kolo::shutdown();
  }, options);
  // The worlds' flight directories (inside the job's, named by the tag of its
  // secret, never by its id) went with their sessions.
  ASSERT_FALSE(job_id.empty());
  for (const auto& entry : std::filesystem::directory_iterator("/tmp")) {
    EXPECT_EQ(entry.path().filename().string().find("kolo-flight-" + job_tag(secret)), std::string::npos) << entry.path();
    EXPECT_EQ(entry.path().filename().string().find(job_id), std::string::npos) << entry.path();
  }
}

// A refusal on one rank alone keeps the job's sessions in step: the next init()
// of every rank still meets the others.
TEST(Worlds, ARefusedListLeavesTheNextInitInStep) {
  run_ranks(3, [](int rank) {
    if (rank == 1) EXPECT_THROW(kolo::init({0, 2}), InvalidArgumentError);
    kolo::init();
    EXPECT_EQ(sum_of(1, "after.refusal"), 3);
    kolo::shutdown();
  });
}

// Parameter servers serve the whole job only.
TEST(Worlds, AWorldDoesNotGoThroughParameterServers) {
  SpawnOptions options;
  options.env["KOLO_NUM_SERVERS"] = "1";
  run_ranks(2, [](int) {
    try {
      kolo::init({1, 0});
      ADD_FAILURE() << "init with a list under KOLO_NUM_SERVERS";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("parameter-server mode"), std::string::npos) << e.what();
    }
  }, options);
}

}  // namespace
}  // namespace kolo::testing
