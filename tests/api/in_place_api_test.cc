// The public API works in place of the ranks' memory exactly when the call's
// tensors carry their shareable memory (Tensor::memory): views of shareable
// Buffers do, on every route an operation takes through the engine (negotiated,
// cached and run by the caller, asynchronous, a group, out of place with a
// prescale, a part of a Buffer), and so do the Buffers the engine allocates for
// an allgather; a bare pointer into the same memory does not. Seen from outside
// the library: a rank that worked in place has mapped its peer's files.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "harness/multiprocess.h"
#include "harness/shareable_files.h"
#include "kolo/kolo.h"

namespace kolo::testing {
namespace {

constexpr std::int64_t kCount = 1 << 20;  // 4 MiB of floats: past KOLO_SHM_MAPPED_BYTES

// A fresh shareable Buffer of kCount floats, each rank + 1, kept alive in
// `kept` so that every call maps new files (a released one would come back
// from the mapping cache, already mapped by the peer).
Buffer& fresh(std::vector<Buffer>& kept, int rank) {
  kept.push_back(Buffer::shareable(DataType::Float32, Shape{kCount}));
  Buffer& b = kept.back();
  std::fill(b.as<float>(), b.as<float>() + kCount, static_cast<float>(rank + 1));
  return b;
}

// Runs `call` and expects it to have mapped `files` more shareable files.
void expect_maps(std::size_t files, const std::string& route, const std::function<void()>& call) {
  const std::size_t before = mapped_shareable_files();
  call();
  EXPECT_EQ(mapped_shareable_files(), before + files) << route;
}

TEST(InPlaceApi, AllreduceWorksInPlaceOfViewsOnEveryRouteAndNotOfBarePointers) {
  run_ranks(2, [](int rank) {
    kolo::init();
    std::vector<Buffer> kept;
    kept.reserve(16);  // the references fresh() returns stay valid

    Buffer& bare = fresh(kept, rank);
    expect_maps(0, "bare pointer", [&] {
      kolo::allreduce(make_tensor(bare.as<float>(), kCount), {.op = ReduceOp::Sum, .name = "bare"});
    });
    EXPECT_EQ(bare.as<float>()[kCount - 1], 3.0f);

    for (const char* route : {"negotiated", "cached"}) {  // the second call of a name runs from the response cache
      Buffer& b = fresh(kept, rank);
      expect_maps(1, route, [&] { kolo::allreduce(b.view(), {.op = ReduceOp::Sum, .name = "blocking"}); });
      EXPECT_EQ(b.as<float>()[kCount - 1], 3.0f) << route;
    }

    Buffer& async = fresh(kept, rank);
    expect_maps(1, "async", [&] {
      kolo::allreduce_async(async.view(), {.op = ReduceOp::Sum, .name = "async"}).wait();
    });
    EXPECT_EQ(async.as<float>()[0], 3.0f);

    Buffer& grouped = fresh(kept, rank);
    const Tensor group[] = {grouped.view()};
    expect_maps(1, "group of one", [&] { kolo::grouped_allreduce(group, {.op = ReduceOp::Sum, .name = "group"}); });
    EXPECT_EQ(grouped.as<float>()[0], 3.0f);

    // Out of place with a prescale: the input is scaled into the output first,
    // which then is both sides of the collective.
    std::vector<float> plain_input(kCount, static_cast<float>(rank + 1));
    Buffer& output = fresh(kept, rank);
    expect_maps(1, "prescaled into a view", [&] {
      kolo::allreduce(make_tensor(plain_input.data(), kCount), output.view(),
                      {.op = ReduceOp::Sum, .prescale = 2.0, .name = "scaled"});
    });
    EXPECT_EQ(output.as<float>()[kCount - 1], 6.0f);

    // A part of a Buffer, at an offset: found inside its memory, and nothing
    // outside the part is touched.
    Buffer& whole = fresh(kept, rank);
    Tensor part = whole.view();
    part.data = whole.as<float>() + 1000;
    part.shape = {kCount - 2000};
    expect_maps(1, "part of a Buffer", [&] { kolo::allreduce(part, {.op = ReduceOp::Sum, .name = "part"}); });
    EXPECT_EQ(whole.as<float>()[999], static_cast<float>(rank + 1));
    EXPECT_EQ(whole.as<float>()[1000], 3.0f);
    EXPECT_EQ(whole.as<float>()[kCount - 1001], 3.0f);
    EXPECT_EQ(whole.as<float>()[kCount - 1000], static_cast<float>(rank + 1));
    kolo::shutdown();
  });
}

// The engine allocates an allgather's output itself; where that Buffer is
// shareable (KOLO_SHAREABLE_BUFFERS=1 makes every large one so), the ranks
// gather into each other's outputs in place.
TEST(InPlaceApi, AllgatherGathersInPlaceOfTheOutputsTheEngineAllocates) {
  SpawnOptions options;
  options.env["KOLO_SHAREABLE_BUFFERS"] = "1";
  run_ranks(
      2,
      [](int rank) {
        kolo::init();
        std::vector<float> input(kCount, static_cast<float>(rank + 1));
        Buffer gathered;
        // Its own output, and the peer's it gathered into.
        expect_maps(2, "allgather", [&] { gathered = kolo::allgather(make_tensor(input.data(), kCount)); });
        ASSERT_EQ(gathered.nbytes(), std::size_t{2} * kCount * sizeof(float));
        EXPECT_EQ(gathered.as<float>()[0], 1.0f);
        EXPECT_EQ(gathered.as<float>()[2 * kCount - 1], 2.0f);
        kolo::shutdown();
      },
      options);
}

// A fused batch of views of one Buffer (a gradient bucket) laid out alike on
// every rank, in any order and with gaps between them, is reduced in place of
// the ranks' Buffers. Where one rank's views lie elsewhere in its Buffer (another
// order), every rank copies through the slots alike, with the right sums.
TEST(InPlaceApi, AFusedBatchOfViewsLaidOutAlikeOnEveryRankIsReducedInPlace) {
  run_ranks(2, [](int rank) {
    kolo::init();
    std::vector<Buffer> kept;
    kept.reserve(3);
    constexpr std::int64_t kPart = kCount / 8;
    // Parts 0, 2, 4 and 6 of the Buffer (1, 3, 5 and 7 untouched), in `order`.
    auto parts = [&](Buffer& b, std::vector<int> order) {
      std::vector<Tensor> views;
      for (int i : order) {
        Tensor t = b.view();
        t.data = b.as<float>() + 2 * i * kPart;
        t.shape = {kPart};
        views.push_back(t);
      }
      return views;
    };
    auto check = [&](const Buffer& b, const std::string& route) {
      for (int part = 0; part < 8; ++part) {
        const float expected = part % 2 == 0 ? 3.0f : static_cast<float>(rank + 1);
        EXPECT_EQ(b.as<float>()[part * kPart], expected) << route << " part " << part;
        EXPECT_EQ(b.as<float>()[(part + 1) * kPart - 1], expected) << route << " part " << part;
      }
    };
    Buffer& in_order = fresh(kept, rank);
    expect_maps(1, "in order", [&] {
      kolo::grouped_allreduce(parts(in_order, {0, 1, 2, 3}), {.op = ReduceOp::Sum, .name = "in_order"});
    });
    check(in_order, "in order");

    Buffer& shuffled = fresh(kept, rank);
    expect_maps(1, "shuffled alike", [&] {
      kolo::grouped_allreduce(parts(shuffled, {2, 0, 3, 1}), {.op = ReduceOp::Sum, .name = "shuffled"});
    });
    check(shuffled, "shuffled alike");

    Buffer& apart = fresh(kept, rank);
    expect_maps(0, "laid out otherwise on rank 1", [&] {
      kolo::grouped_allreduce(parts(apart, rank == 1 ? std::vector<int>{3, 2, 1, 0} : std::vector<int>{0, 1, 2, 3}),
                              {.op = ReduceOp::Sum, .name = "apart"});
    });
    check(apart, "laid out otherwise");
    kolo::shutdown();
  });
}

// Memory that does not hold the view's data (another Buffer's, or a Buffer's
// given to plain memory) is not what the data lies in: such a view is plain
// memory, copied through the slots, with the right result.
TEST(InPlaceApi, AViewWhoseMemoryDoesNotHoldItsDataIsCopiedAsPlainMemory) {
  run_ranks(2, [](int rank) {
    kolo::init();
    std::vector<Buffer> kept;
    kept.reserve(2);
    Buffer& a = fresh(kept, rank);
    const Buffer& b = fresh(kept, rank);
    Tensor elsewhere = a.view();
    elsewhere.memory = b.memory();
    expect_maps(0, "another Buffer's memory", [&] {
      kolo::allreduce(elsewhere, {.op = ReduceOp::Sum, .name = "elsewhere"});
    });
    EXPECT_EQ(a.as<float>()[kCount - 1], 3.0f);
    std::vector<float> plain(kCount, static_cast<float>(rank + 1));
    const Tensor claimed{plain.data(), DataType::Float32, Shape{kCount}, a.memory()};
    expect_maps(0, "plain memory given a Buffer's", [&] {
      kolo::allreduce(claimed, {.op = ReduceOp::Sum, .name = "claimed"});
    });
    EXPECT_EQ(plain[kCount - 1], 3.0f);
    kolo::shutdown();
  });
}

}  // namespace
}  // namespace kolo::testing
