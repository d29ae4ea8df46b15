// Small cached allreduces carried in the negotiation step (engine/agreement.h):
// one collective per operation instead of two, a fallback when the ranks offer
// different operations, and a clear error when the ranks are configured
// differently. That the results are those of every other route is
// engine_routes_test.cc. Engines run on real shared-memory communicators in
// real processes; a forwarding communicator counts their collectives.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "harness/counted_engine.h"
#include "kolo/error.h"

namespace kolo::testing {
namespace {

using namespace std::chrono_literals;

// Collectives per repeated cached allreduce of `floats` floats, after
// a first call that fills the cache; checks every result.
double collectives_per_call(int rank, const CountedEngineOptions& options, std::size_t floats) {
  auto [engine, comm] = make_counted_engine(rank, options);
  std::vector<float> in(floats), out(floats);
  constexpr int kCalls = 40;
  int before = 0;
  for (int call = -1; call < kCalls; ++call) {
    if (call == 0) before = comm->collectives();
    for (std::size_t i = 0; i < floats; ++i) in[i] = static_cast<float>((rank + 1) * (call + 2) + i);
    allreduce(*engine, "metric", in, out);
    const int n = engine->size();  // sum of (rank + 1) * (call + 2) + i over the ranks
    for (std::size_t i = 0; i < floats; ++i)
      EXPECT_EQ(out[i], n * (n + 1) / 2.0f * (call + 2) + static_cast<float>(n) * i) << "call " << call;
  }
  return static_cast<double>(comm->collectives() - before) / kCalls;
}

double collectives_per_call(int rank, std::optional<std::size_t> eager_bytes, std::size_t floats,
                            bool padding = false, bool tcp = false) {
  CountedEngineOptions options;
  options.eager_bytes = eager_bytes;
  options.padding = padding;
  options.tcp = tcp;
  return collectives_per_call(rank, options, floats);
}

TEST(EngineEager, ASmallCachedAllreduceTakesOneCollective) {
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, 256, 2), 1.0);
    // The default on shared memory, which moves only the bytes offered: 4 KiB in small jobs.
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 1024), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 2), 1.0);
  }, no_store());
}

// A payload longer than the step's flagged lines rides through the slot.
TEST(EngineEager, APayloadLongerThanTheFlaggedLinesStillRidesInTheStep) {
  run_ranks(2, [](int rank) { EXPECT_EQ(collectives_per_call(rank, 8192, 2000), 1.0); }, no_store());
}

// With small slots the default stays within a quarter of one: 2 KiB for 8 KiB slots.
TEST(EngineEager, TheDefaultFollowsTheSlotSize) {
  run_ranks(2, [](int rank) {
    ::setenv("KOLO_SHM_SLOT_BYTES", "8192", 1);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 512), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 513), 2.0);
  }, no_store());
}

// Where every block is padded to the largest payload, the default stays at 64
// bytes, so that every cycle does not move a kilobyte per rank.
TEST(EngineEager, WhereBlocksArePaddedTheDefaultStaysAt64Bytes) {
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 16, true), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 17, true), 2.0);
    EXPECT_EQ(collectives_per_call(rank, 512, 128, true), 1.0);  // set explicitly, it applies there too
  }, no_store());
}

// kolo's TCP communicator moves self-sized blocks at their own length, and its
// own allreduce sends whole inputs up to 64 KiB: across hosts the step carries
// operations up to 64 KiB, and the steady state is one collective.
TEST(EngineEager, OverTcpTheDefaultIs64KiB) {
  SpawnOptions options;
  options.timeout = 60s;
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 2, false, true), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 16384, false, true), 1.0);
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 16385, false, true), 2.0);
  }, options);
}

// The hierarchical composition moves only the bytes each rank offers through
// its host and across hosts, so it carries what its parts carry: shared
// memory's 4 KiB with two ranks per host, TCP's 64 KiB with one.
TEST(EngineEager, HierarchicallyTheDefaultIsWhatItsPartsCarry) {
  // One job per engine: each joins the job's communicator afresh.
  auto expect_per_call = [](HostShape hosts, std::size_t floats, double collectives) {
    SpawnOptions options;
    options.timeout = 60s;
    run_ranks(hosts.ranks(), [&](int rank) {
      CountedEngineOptions counted;
      counted.hierarchical = hosts;
      EXPECT_EQ(collectives_per_call(rank, counted, floats), collectives) << floats << " floats";
    }, options);
  };
  expect_per_call({.per_host = 2, .hosts = 2}, 1024, 1.0);
  expect_per_call({.per_host = 2, .hosts = 2}, 1025, 2.0);
  expect_per_call({.per_host = 1, .hosts = 2}, 16384, 1.0);
  expect_per_call({.per_host = 1, .hosts = 2}, 16385, 2.0);
}

TEST(EngineEager, WithoutItOrAboveItsSizeTheDataTakesASecondCollective) {
  run_ranks(2, [](int rank) {
    EXPECT_EQ(collectives_per_call(rank, 0, 2), 2.0);
    EXPECT_EQ(collectives_per_call(rank, 256, 65), 2.0);            // 260 bytes
    EXPECT_EQ(collectives_per_call(rank, std::nullopt, 1025), 2.0);  // 4100 bytes
  }, no_store());
}

// Rank 1 has two operations ready and offers the lower bit; rank 0 has only the
// other one: the offers differ, the common one runs as a collective, and the
// second runs eagerly once rank 0 submits it too.
TEST(EngineEager, RanksOfferingDifferentOperationsFallBackAndStillAgree) {
  run_ranks(2, [](int rank) {
    auto [engine, comm] = make_counted_engine(rank, 256);
    std::vector<float> in_a = {1.0f + rank}, in_b = {10.0f * (rank + 1)}, a(1), b(1);
    allreduce(*engine, "b", in_b, b);  // bit 0
    allreduce(*engine, "a", in_a, a);  // bit 1
    a = b = {0.0f};
    const int before = comm->collectives();
    if (rank == 0) {
      allreduce(*engine, "a", in_a, a);
      allreduce(*engine, "b", in_b, b);
    } else {
      auto pending_b = submit_allreduce(*engine, "b", in_b, b);
      auto pending_a = submit_allreduce(*engine, "a", in_a, a);
      wait(*engine, pending_a);
      wait(*engine, pending_b);
    }
    EXPECT_EQ(a[0], 3.0f);
    EXPECT_EQ(b[0], 30.0f);
    // "a": the agreement step, then its data; "b": one step.
    EXPECT_EQ(comm->collectives() - before, 3);
  }, no_store());
}

// Every rank gets the same message, from the engine's start, naming the ranks;
// over tcp the longer block is drained, not read as the next message.
void expect_differing_eager_sizes_named(int rank, bool tcp) {
  CountedEngineOptions options;
  options.eager_bytes = rank == 0 ? 256 : 64;
  options.tcp = tcp;
  try {
    auto counted = make_counted_engine(rank, options);
    ADD_FAILURE() << "the engine started";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("KOLO_EAGER_BYTES is 64 on rank 1; 256 on rank 0"), std::string::npos)
        << e.what();
  }
}

TEST(EngineEager, EagerSizesThatDifferAcrossRanksAreAClearError) {
  run_ranks(2, [](int rank) { expect_differing_eager_sizes_named(rank, false); }, no_store());
  run_ranks(2, [](int rank) { expect_differing_eager_sizes_named(rank, true); });
}

}  // namespace
}  // namespace kolo::testing
