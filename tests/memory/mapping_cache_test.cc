// Large Buffers reuse the mappings of released ones (memory/mapping_cache.h):
// exact sizes only, the most recent first, within the limit (oldest unmapped
// first), shareable and private ones apart, and a zero-filled Buffer is zero
// even on a reused mapping.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "kolo/types.h"
#include "memory/mapping_cache.h"
#include "memory/shareable_memory.h"

namespace kolo::detail {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

void* map(std::size_t length) {
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT_NE(p, MAP_FAILED);
  return p;
}

bool mapped(void* p, std::size_t length) { return ::msync(p, length, MS_ASYNC) == 0 || errno != ENOMEM; }

TEST(MappingCache, GivesBackAKeptMappingOfExactlyTheRequestedLength) {
  MappingCache cache(16 * kMiB);
  EXPECT_EQ(cache.take(2 * kMiB), nullptr);
  void* a = map(2 * kMiB);
  cache.give(a, 2 * kMiB);
  EXPECT_EQ(cache.kept_bytes(), 2 * kMiB);
  EXPECT_EQ(cache.take(4 * kMiB), nullptr);
  EXPECT_EQ(cache.take(2 * kMiB), a);
  EXPECT_EQ(cache.kept_bytes(), 0u);
  EXPECT_EQ(cache.take(2 * kMiB), nullptr);
  ::munmap(a, 2 * kMiB);
}

TEST(MappingCache, TheMostRecentlyReleasedComesFirst) {
  MappingCache cache(16 * kMiB);
  void* a = map(2 * kMiB);
  void* b = map(2 * kMiB);
  cache.give(a, 2 * kMiB);
  cache.give(b, 2 * kMiB);
  EXPECT_EQ(cache.take(2 * kMiB), b);
  EXPECT_EQ(cache.take(2 * kMiB), a);
  ::munmap(a, 2 * kMiB);
  ::munmap(b, 2 * kMiB);
}

TEST(MappingCache, StaysWithinItsLimitByUnmappingTheOldest) {
  MappingCache cache(4 * kMiB);
  void* a = map(2 * kMiB);
  void* b = map(2 * kMiB);
  void* c = map(2 * kMiB);
  cache.give(a, 2 * kMiB);
  cache.give(b, 2 * kMiB);
  cache.give(c, 2 * kMiB);
  EXPECT_EQ(cache.kept_bytes(), 4 * kMiB);
  EXPECT_FALSE(mapped(a, 2 * kMiB)) << "the oldest mapping should have been unmapped";
  EXPECT_EQ(cache.take(2 * kMiB), c);
  EXPECT_EQ(cache.take(2 * kMiB), b);
  EXPECT_EQ(cache.take(2 * kMiB), nullptr);
  ::munmap(b, 2 * kMiB);
  ::munmap(c, 2 * kMiB);
}

TEST(MappingCache, AMappingLargerThanTheLimitIsUnmappedAtOnce) {
  MappingCache cache(2 * kMiB);
  void* a = map(4 * kMiB);
  cache.give(a, 4 * kMiB);
  EXPECT_EQ(cache.kept_bytes(), 0u);
  EXPECT_FALSE(mapped(a, 4 * kMiB));
  MappingCache none(0);
  void* b = map(2 * kMiB);
  none.give(b, 2 * kMiB);
  EXPECT_FALSE(mapped(b, 2 * kMiB));
}

TEST(MappingCache, DestroyingTheCacheUnmapsWhatItKept) {
  void* a = map(2 * kMiB);
  {
    MappingCache cache(16 * kMiB);
    cache.give(a, 2 * kMiB);
  }
  EXPECT_FALSE(mapped(a, 2 * kMiB));
}

// A shareable mapping comes back only as shareable, with its descriptor (which
// the next Buffer's views carry), and a private one only as private.
TEST(MappingCache, KeepsShareableAndPrivateMappingsApart) {
  void* plain = map(2 * kMiB);
  ShareableMemory* shared = map_shareable(2 * kMiB, 2 * kMiB);
  ASSERT_NE(shared, nullptr);
  const int fd = shared->fd;
  {
    MappingCache cache(16 * kMiB);
    cache.give(plain, 2 * kMiB);
    cache.give(shared);
    EXPECT_EQ(cache.kept_bytes(), 4 * kMiB);
    EXPECT_EQ(cache.take_shareable(4 * kMiB), nullptr);
    EXPECT_EQ(cache.take_shareable(2 * kMiB), shared);
    EXPECT_EQ(cache.take_shareable(2 * kMiB), nullptr);  // not the private one
    EXPECT_EQ(cache.take(2 * kMiB), plain);
    EXPECT_EQ(cache.take(2 * kMiB), nullptr);
    cache.give(shared);
    cache.give(plain, 2 * kMiB);
  }
  EXPECT_FALSE(mapped(plain, 2 * kMiB));
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the shareable mapping's file should have been closed";
}

TEST(MappingCache, ALargeBufferReusesTheLastOnesMemoryAndAZeroFilledOneIsZero) {
  const Shape shape{static_cast<std::int64_t>(4 * kMiB / sizeof(float))};
  void* first = nullptr;
  {
    Buffer dirty = Buffer::uninitialized(DataType::Float32, shape);
    std::memset(dirty.data(), 0x5a, dirty.nbytes());
    first = dirty.data();
  }
  Buffer zeroed(DataType::Float32, shape);
  EXPECT_EQ(zeroed.data(), first) << "the released mapping should have been reused";
  const auto* bytes = static_cast<const unsigned char*>(zeroed.data());
  for (std::size_t i = 0; i < zeroed.nbytes(); i += 4093) ASSERT_EQ(bytes[i], 0) << "byte " << i;
  ASSERT_EQ(bytes[zeroed.nbytes() - 1], 0);
}

}  // namespace
}  // namespace kolo::detail
