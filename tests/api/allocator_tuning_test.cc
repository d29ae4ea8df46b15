// kolo::init() keeps large blocks on glibc's heap (see src/api/allocator_tuning.h):
// a 16 MiB allocation after init is not a fresh mmap, unless KOLO_TUNE_MALLOC=0.
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdlib>
#include <map>
#include <string>

#include "harness/multiprocess.h"
#include "kolo/kolo.h"

namespace {

constexpr std::size_t kBlock = 16 << 20;

// Allocates (and keeps) a block; true when glibc served it with mmap.
bool next_block_is_mmapped() {
  const auto before = ::mallinfo2().hblkhd;
  void* block = std::malloc(kBlock);
  EXPECT_NE(block, nullptr);
  return ::mallinfo2().hblkhd - before >= kBlock;
}

void expect_init_tuning(bool tuned, std::map<std::string, std::string> env) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer's allocator replaces glibc's: nothing to tune or observe";
#endif
  kolo::testing::SpawnOptions options;
  options.env = std::move(env);
  kolo::testing::run_ranks(
      2,
      [tuned](int) {
        // glibc's starting threshold, whatever this process did before.
        ASSERT_EQ(::mallopt(M_MMAP_THRESHOLD, 128 << 10), 1);
        ASSERT_TRUE(next_block_is_mmapped()) << "the starting point: 16 MiB above the threshold";
        kolo::init();
        EXPECT_EQ(next_block_is_mmapped(), !tuned);
        kolo::shutdown();
      },
      options);
}

TEST(AllocatorTuning, InitKeepsLargeBlocksOnTheHeap) { expect_init_tuning(true, {}); }

TEST(AllocatorTuning, KoloTuneMallocZeroLeavesTheAllocatorAlone) {
  expect_init_tuning(false, {{"KOLO_TUNE_MALLOC", "0"}});
}

}  // namespace
