// kolo::Buffer: the memory collectives return. Small buffers come from the heap;
// large ones are mappings of their own aligned to 2 MiB for transparent huge pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <utility>

#include "kolo/error.h"
#include "kolo/types.h"

namespace kolo {
namespace {

bool all_zero(const Buffer& b) {
  const auto* p = static_cast<const std::uint8_t*>(b.data());
  for (std::size_t i = 0; i < b.nbytes(); ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(Buffer, SmallAndLargeBuffersStartZeroed) {
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{1000}, std::int64_t{3} << 20}) {
    Buffer b(DataType::Float32, {n});
    ASSERT_EQ(b.nbytes(), static_cast<std::size_t>(n) * 4);
    EXPECT_TRUE(all_zero(b)) << n << " floats";
  }
}

TEST(Buffer, LargeBuffersAreAlignedForHugePages) {
  Buffer b = Buffer::uninitialized(DataType::UInt8, {(std::int64_t{5} << 20) + 3});
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % (std::uintptr_t{2} << 20), 0u);
  std::memset(b.data(), 0x5a, b.nbytes());  // every byte is writable
  EXPECT_EQ(b.as<std::uint8_t>()[b.nbytes() - 1], 0x5a);
}

TEST(Buffer, EmptyBufferHasNoBytes) {
  Buffer b(DataType::Float64, {0, 7});
  EXPECT_EQ(b.nbytes(), 0u);
  Buffer none;
  EXPECT_EQ(none.nbytes(), 0u);
  EXPECT_EQ(none.data(), nullptr);
}

// The moved-from Buffer kept its size with no memory, and copying it read
// through a null pointer.
TEST(Buffer, MovedFromBufferIsEmptyAndCopies) {
  for (std::int64_t n : {std::int64_t{16}, std::int64_t{1} << 20}) {
    Buffer a(DataType::Float32, {n});
    Buffer b = std::move(a);
    Buffer c(DataType::Int64, {3});
    c = std::move(b);
    for (const Buffer* from : {&a, &b}) {
      EXPECT_EQ(from->nbytes(), 0u);
      EXPECT_EQ(from->data(), nullptr);
      EXPECT_EQ(num_elements(from->shape()), 0);
      Buffer copy = *from;
      EXPECT_EQ(copy.nbytes(), 0u);
      EXPECT_EQ(copy.data(), nullptr);
      c = *from;  // and assigned over one with memory
      EXPECT_EQ(c.nbytes(), 0u);
    }
  }
  Buffer none, copy = none;
  EXPECT_EQ(num_elements(none.shape()), 0);
  EXPECT_EQ(copy.data(), nullptr);
}

// Sizes that do not exist used to reach the allocator (std::bad_alloc) or wrap.
TEST(Buffer, ImpossibleShapesAreInvalidArguments) {
  EXPECT_THROW(Buffer(DataType::Float32, {-1}), InvalidArgumentError);
  EXPECT_THROW(Buffer(DataType::Float32, {2, -3}), InvalidArgumentError);
  EXPECT_THROW(Buffer(DataType::Float32, {(std::int64_t{1} << 62) + 1, 4}), InvalidArgumentError);
  EXPECT_THROW(Buffer(DataType::Float64, {std::int64_t{1} << 61}), InvalidArgumentError);
  EXPECT_THROW(Buffer::uninitialized(DataType::UInt8, {0, INT64_MAX, 2}), InvalidArgumentError);
  EXPECT_EQ(Buffer(DataType::Float32, {0, INT64_MAX / 8}).nbytes(), 0u);
}

TEST(Buffer, CopiesAreDeepAndMovesTakeTheMemory) {
  for (std::int64_t n : {std::int64_t{16}, std::int64_t{1} << 20}) {
    Buffer a = Buffer::uninitialized(DataType::Int32, {n});
    for (std::int64_t i = 0; i < n; ++i) a.as<std::int32_t>()[i] = static_cast<std::int32_t>(i * 3);
    Buffer copy = a;
    ASSERT_NE(copy.data(), a.data());
    EXPECT_EQ(copy.shape(), a.shape());
    EXPECT_EQ(std::memcmp(copy.data(), a.data(), a.nbytes()), 0);
    copy.as<std::int32_t>()[0] = -1;
    EXPECT_EQ(a.as<std::int32_t>()[0], 0);

    const void* memory = a.data();
    Buffer moved = std::move(a);
    EXPECT_EQ(moved.data(), memory);
    EXPECT_EQ(moved.as<std::int32_t>()[n - 1], static_cast<std::int32_t>((n - 1) * 3));

    copy = moved;  // assignment over an existing buffer
    EXPECT_EQ(copy.as<std::int32_t>()[0], 0);
  }
}

}  // namespace
}  // namespace kolo
