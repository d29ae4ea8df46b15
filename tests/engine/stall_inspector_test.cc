// The stall inspector: which ranks are behind, and the job stops when told to.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/wire.h"
#include "engine/stall_inspector.h"
#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::engine {
namespace {

using namespace std::chrono_literals;

TEST(StallInspector, NamesTheRanksThatAreBehind) {
  std::vector<PendingReport> reports(4);
  reports[0].pending = {{"grad.w", 61200}, {"fresh", 10}};
  reports[1].pending = {{"grad.w", 60500}};
  reports[3].joined = true;  // joined ranks are never "missing"
  auto stalls = find_stalls(reports, 60s);
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_EQ(stalls[0].name, "grad.w");
  EXPECT_EQ(stalls[0].missing, std::vector<int>{2});
  EXPECT_EQ(describe(stalls[0]), "'grad.w' has waited 61.2 s for rank(s) 2 (submitted by 0, 1)");
  // Pending everywhere is not a stall: all ranks submitted it.
  reports[2].pending = {{"grad.w", 1}};
  EXPECT_TRUE(find_stalls(reports, 60s).empty());
}

TEST(StallInspector, ReportsRoundTripAndRejectGarbage) {
  PendingReport r;
  r.joined = true;
  r.pending = {{"a", 5}, {"bb", 7}};
  auto back = decode_report(encode_report(r));
  EXPECT_TRUE(back.joined);
  EXPECT_EQ(back.pending, r.pending);
  auto bytes = encode_report(r);
  for (std::size_t len = 0; len < bytes.size(); ++len)
    EXPECT_THROW(decode_report(std::span(bytes.data(), len)), wire::WireError);
  std::vector<std::uint8_t> huge = {0x53, 0, 0xff, 0xff, 0xff, 0x7f};
  EXPECT_THROW(decode_report(huge), wire::WireError);
}

TEST(StallInspector, StallShutdownEndsTheJobOnEveryRankNamingTheLaggard) {
  kolo::testing::SpawnOptions options;
  options.env["KOLO_STALL_CHECK_TIME"] = "0.5";
  options.env["KOLO_STALL_SHUTDOWN_TIME"] = "2";
  kolo::testing::run_ranks(3, [](int rank) {
    kolo::init();
    float x = 1.0f;
    auto start = std::chrono::steady_clock::now();
    if (rank == 2) {
      // Stuck in "user code": submits nothing while the others wait. Its engine
      // still takes part in the verdict and stops with the same error.
      std::this_thread::sleep_for(4s);
      try {
        kolo::allreduce(make_tensor(&x, 1), {.name = "late"});
        ADD_FAILURE() << "the job went on after the stall shutdown";
      } catch (const PeerFailureError& e) {
        EXPECT_NE(std::string(e.what()).find("rank(s) 2"), std::string::npos) << e.what();
      }
    } else {
      try {
        kolo::allreduce(make_tensor(&x, 1), {.name = "x"});
        ADD_FAILURE() << "allreduce completed without rank 2";
      } catch (const PeerFailureError& e) {
        EXPECT_EQ(e.peer_rank(), 2) << e.what();
        EXPECT_NE(std::string(e.what()).find("'x' has waited"), std::string::npos) << e.what();
      }
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
    kolo::shutdown();
  }, options);
}

TEST(StallInspector, DifferentCollectiveSequencesAreReportedNotHungOn) {
  kolo::testing::SpawnOptions options;
  options.env["KOLO_STALL_CHECK_TIME"] = "0.5";
  options.env["KOLO_STALL_SHUTDOWN_TIME"] = "1.5";
  kolo::testing::run_ranks(2, [](int rank) {
    kolo::init();
    float x = 1.0f;
    // Rank 0 reduces 'a' while rank 1 reduces 'b': each waits for the other.
    EXPECT_THROW(kolo::allreduce(make_tensor(&x, 1), {.name = rank == 0 ? "a" : "b"}), PeerFailureError);
    kolo::shutdown();
  }, options);
}

}  // namespace
}  // namespace kolo::engine
