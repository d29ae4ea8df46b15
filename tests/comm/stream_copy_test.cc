// The shared-memory copies (comm/shm/stream_copy.h) copy exactly `bytes` bytes,
// at any alignment of either side, on both sides of the size where
// copy_to_shared switches to `rep movsb` and of copy_streaming's 64-byte body,
// and touch nothing outside the destination.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "comm/shm/stream_copy.h"

namespace kolo::comm::shm {
namespace {

using CopyFn = void (*)(void*, const void*, std::size_t);

constexpr std::size_t kGuard = 96;
constexpr std::byte kUntouched{0xA5};

void expect_exact_copy(CopyFn copy, std::size_t bytes, std::size_t src_offset, std::size_t dst_offset) {
  std::vector<std::byte> src(bytes + src_offset + 1);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>((i * 131 + 7) % 251);
  std::vector<std::byte> dst(bytes + dst_offset + 2 * kGuard, kUntouched);
  std::byte* out = dst.data() + kGuard + dst_offset;
  copy(out, src.data() + src_offset, bytes);
  const std::string where = "bytes=" + std::to_string(bytes) + " src+" + std::to_string(src_offset) + " dst+" +
                            std::to_string(dst_offset);
  for (std::size_t i = 0; i < bytes; ++i) {
    ASSERT_EQ(out[i], src[src_offset + i]) << where << " at byte " << i;
  }
  for (std::byte* p = dst.data(); p < out; ++p) ASSERT_EQ(*p, kUntouched) << where << ": wrote before the destination";
  for (std::byte* p = out + bytes; p < dst.data() + dst.size(); ++p)
    ASSERT_EQ(*p, kUntouched) << where << ": wrote past the destination";
}

void sweep(CopyFn copy) {
  const std::size_t sizes[] = {0, 1, 15, 63, 64, 65, 2047, 2048, 2049, 16 * 1024 + 5, (1 << 20) + 13};
  const std::size_t offsets[] = {0, 1, 8, 17, 63};
  for (std::size_t bytes : sizes) {
    for (std::size_t src_offset : offsets) {
      for (std::size_t dst_offset : offsets) {
        expect_exact_copy(copy, bytes, src_offset, dst_offset);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(StreamCopy, CopyToSharedCopiesExactlyAtEverySizeAndAlignment) { sweep(copy_to_shared); }

TEST(StreamCopy, CopyStreamingCopiesExactlyAtEverySizeAndAlignment) { sweep(copy_streaming); }

}  // namespace
}  // namespace kolo::comm::shm
