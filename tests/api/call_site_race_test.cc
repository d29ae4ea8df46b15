// Unnamed operations are numbered per call site in the order threads arrive
// there, which differs between ranks: two threads of a rank with operations of
// one call site in flight at once are refused on every rank, with a message that
// says to name them, instead of pairing different tensors across ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

TEST(CallSiteRace, TwoThreadsInFlightAtOneUnnamedSiteAreRefusedEverywhere) {
  run_ranks(2, [](int rank) {
    kolo::init();
    // One call site for both threads.
    auto submit = [](float* value) { return kolo::allreduce_async(make_tensor(value, 1), {.op = ReduceOp::Sum}); };
    // Rank 1 comes late, so that rank 0's first operation is still in flight
    // when its second thread submits.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    float first = 1.0f + rank, second = 10.0f + rank;
    Handle h0, h1;
    std::thread([&] { h0 = submit(&first); }).join();
    std::thread([&] { h1 = submit(&second); }).join();
    h0.wait();
    EXPECT_EQ(first, 3.0f);  // the first thread's values on both ranks
    try {
      h1.wait();
      ADD_FAILURE() << "rank " << rank << ": the racing operation ran";
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 had operations from two threads in flight at once"),
                std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("give each thread's operations names of their own"), std::string::npos);
    }
    // One thread at a time at that site, and named operations from many threads, go on.
    std::thread([&] { submit(&first).wait(); }).join();
    std::thread([&] { submit(&second).wait(); }).join();
    EXPECT_EQ(second, 21.0f);
    float a = 1.0f, b = 2.0f;
    std::thread ta([&] { kolo::allreduce(make_tensor(&a, 1), {.op = ReduceOp::Sum, .name = "a"}); });
    std::thread tb([&] { kolo::allreduce(make_tensor(&b, 1), {.op = ReduceOp::Sum, .name = "b"}); });
    ta.join();
    tb.join();
    EXPECT_EQ(a + b, 6.0f);
    kolo::shutdown();
  });
}

}  // namespace
}  // namespace kolo::testing
