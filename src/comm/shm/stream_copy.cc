#include "comm/shm/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kolo::comm::shm {
namespace {

// Below this size glibc's memcpy does not use `rep movsb` either (its
// x86_rep_movsb_threshold on AVX-512 machines): plain moves are as fast there.
constexpr std::size_t kRepMovsbBytes = 2048;

}  // namespace

void copy_streaming(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  // Streaming stores need 16-byte aligned destinations: copy the head plainly.
  std::size_t head = (16 - (reinterpret_cast<std::uintptr_t>(d) & 15u)) & 15u;
  if (head >= bytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  std::size_t i = head;
  for (; i + 64 <= bytes; i += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  std::memcpy(d + i, s + i, bytes - i);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

void copy_to_shared(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  // Below a few KiB `rep movsb` starts slower than glibc's vector copies, and the
  // handful of lines costs the reader little either way.
  if (bytes >= kRepMovsbBytes) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace kolo::comm::shm
