// Float16 / BFloat16 conversions (src/common/half.h): exhaustive where the domain
// is small (all 65536 half values), and on every rounding boundary where it is not.
#include "common/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kolo {
namespace {

bool is_fp16_nan(std::uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool is_bf16_nan(std::uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }
float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// The value of a half, computed from its definition (not from bit tricks).
double fp16_reference_value(std::uint16_t h) {
  int sign = (h & 0x8000u) ? -1 : 1;
  int exp = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  if (exp == 0) return sign * std::ldexp(mant, -24);
  if (exp == 31) return mant ? std::numeric_limits<double>::quiet_NaN() : sign * HUGE_VAL;
  return sign * std::ldexp(1024 + mant, exp - 25);
}

TEST(Half, Fp16ToFloatIsExactForAllValues) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_float(static_cast<std::uint16_t>(h));
    double expected = fp16_reference_value(static_cast<std::uint16_t>(h));
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(f)) << "h=0x" << std::hex << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), expected) << "h=0x" << std::hex << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << "h=0x" << std::hex << h;
    }
  }
}

TEST(Half, Fp16RoundTripsEveryValue) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    auto half = static_cast<std::uint16_t>(h);
    std::uint16_t back = float_to_fp16(fp16_to_float(half));
    if (is_fp16_nan(half)) {
      ASSERT_TRUE(is_fp16_nan(back)) << "h=0x" << std::hex << h;
      ASSERT_EQ(back & 0x8000u, half & 0x8000u);
    } else {
      ASSERT_EQ(back, half) << "h=0x" << std::hex << h;
    }
  }
}

// Every float exactly between two adjacent halves, and one float-ulp either side,
// for every half value: the complete set of rounding boundaries.
TEST(Half, FloatToFp16RoundsToNearestEvenAtEveryBoundary) {
  for (std::uint32_t h = 0; h < 0x7c00u; ++h) {  // positive finite halves
    double lo = fp16_reference_value(static_cast<std::uint16_t>(h));
    double hi = h + 1 == 0x7c00u ? 65536.0 : fp16_reference_value(static_cast<std::uint16_t>(h + 1));
    auto mid = static_cast<float>((lo + hi) / 2);  // exact: halves have 11 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    std::uint16_t even = (h & 1u) ? static_cast<std::uint16_t>(h + 1) : static_cast<std::uint16_t>(h);
    for (int sign = 0; sign < 2; ++sign) {
      float s = sign ? -1.0f : 1.0f;
      std::uint16_t sbit = sign ? 0x8000u : 0u;
      ASSERT_EQ(float_to_fp16(s * mid), even | sbit) << "h=0x" << std::hex << h;
      ASSERT_EQ(float_to_fp16(s * std::nextafter(mid, 0.0f)), h | sbit) << "h=0x" << std::hex << h;
      ASSERT_EQ(float_to_fp16(s * std::nextafter(mid, HUGE_VALF)), (h + 1) | sbit) << "h=0x" << std::hex << h;
    }
  }
}

TEST(Half, FloatToFp16SpecialValues) {
  EXPECT_EQ(float_to_fp16(0.0f), 0x0000u);
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000u);
  EXPECT_EQ(float_to_fp16(HUGE_VALF), 0x7c00u);
  EXPECT_EQ(float_to_fp16(-HUGE_VALF), 0xfc00u);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bffu);
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7bffu);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u);  // halfway to 65536 rounds to even: inf
  EXPECT_EQ(float_to_fp16(1e10f), 0x7c00u);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001u);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000u);  // halfway to it: even is 0
  EXPECT_EQ(float_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001u);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -30)), 0x0000u);
  EXPECT_EQ(float_to_fp16(from_bits(0x00000001u)), 0x0000u);  // float subnormal
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(from_bits(0x7f800001u))));  // signalling NaN with low payload
  EXPECT_TRUE(is_fp16_nan(float_to_fp16(from_bits(0xffc00000u))));
  EXPECT_EQ(float_to_fp16(from_bits(0xffc00000u)) & 0x8000u, 0x8000u);
}

#if defined(__FLT16_MANT_DIG__)
// GCC's own _Float16 conversion (libgcc or F16C) is an independent implementation.
TEST(Half, FloatToFp16MatchesCompilerFloat16) {
  auto check = [](std::uint32_t bits) {
    float f = from_bits(bits);
    auto expected = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    std::uint16_t got = float_to_fp16(f);
    if (is_fp16_nan(expected)) {
      ASSERT_TRUE(is_fp16_nan(got)) << "bits=0x" << std::hex << bits;
    } else {
      ASSERT_EQ(got, expected) << "bits=0x" << std::hex << bits;
    }
  };
  // A stride coprime with everything touches every exponent with varied mantissas.
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 4099) check(static_cast<std::uint32_t>(bits));
  for (std::uint32_t h = 0; h < 65536; ++h) {
    std::uint32_t b = std::bit_cast<std::uint32_t>(fp16_to_float(static_cast<std::uint16_t>(h)));
    for (std::uint32_t d = 0; d < 8; ++d) {
      check(b + (d << 10));
      check(b + (0x1000u - 2u) + d);  // around the normal-range halfway point
    }
  }
  for (std::uint32_t h = 0; h < 65536; ++h) {
    auto half = static_cast<std::uint16_t>(h);
    if (is_fp16_nan(half)) continue;
    ASSERT_EQ(fp16_to_float(half), static_cast<float>(std::bit_cast<_Float16>(half))) << std::hex << h;
  }
}
#endif

#if defined(__x86_64__)
__attribute__((target("f16c"))) float f16c_to_float(std::uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) std::uint16_t f16c_from_float(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// The kernels use F16C when the CPU has it and half.h otherwise: both must give
// the same bits, NaN payloads included.
TEST(Half, Fp16ConversionsMatchF16cBitForBit) {
  if (!__builtin_cpu_supports("f16c")) GTEST_SKIP() << "no F16C on this CPU";
  for (std::uint32_t h = 0; h < 65536; ++h) {
    auto half = static_cast<std::uint16_t>(h);
    ASSERT_EQ(std::bit_cast<std::uint32_t>(fp16_to_float(half)), std::bit_cast<std::uint32_t>(f16c_to_float(half)))
        << "h=0x" << std::hex << h;
  }
  auto check = [](std::uint32_t bits) {
    float f = from_bits(bits);
    ASSERT_EQ(float_to_fp16(f), f16c_from_float(f)) << "bits=0x" << std::hex << bits;
  };
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 4099) check(static_cast<std::uint32_t>(bits));
  for (std::uint32_t payload = 1; payload < (1u << 23); payload += 997) {  // NaNs, both signs
    check(0x7f800000u | payload);
    check(0xff800000u | payload);
  }
}
#endif

TEST(Half, Bf16ToFloatIsTheHighHalf) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    float f = bf16_to_float(static_cast<std::uint16_t>(h));
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), h << 16);
    std::uint16_t back = float_to_bf16(f);
    if (is_bf16_nan(static_cast<std::uint16_t>(h))) {
      ASSERT_TRUE(is_bf16_nan(back));
    } else {
      ASSERT_EQ(back, h);
    }
  }
}

TEST(Half, FloatToBf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)), 0x3f80u);  // halfway, even below
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)), 0x3f82u);  // halfway, odd below: up
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)), 0x3f81u);  // above halfway
  EXPECT_EQ(float_to_bf16(from_bits(0x3f807fffu)), 0x3f80u);  // below halfway
  EXPECT_EQ(float_to_bf16(from_bits(0xbf818000u)), 0xbf82u);  // negative, symmetric
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7fffffu)), 0x7f80u);  // FLT_MAX rounds to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(float_to_bf16(HUGE_VALF), 0x7f80u);
  EXPECT_EQ(float_to_bf16(-HUGE_VALF), 0xff80u);
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000u)), 0x0000u);  // subnormal halfway: even
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000u)), 0x0002u);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000u);
  // NaNs whose payload lies only in the low half must stay NaN, not become inf.
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0xff800001u))));
  EXPECT_TRUE(is_bf16_nan(float_to_bf16(from_bits(0x7fffffffu))));
}

TEST(Half, FloatToBf16MatchesExactRounding) {
  // Reference: pick the nearer of the two neighbouring bf16 values (ties to even).
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 65537) {
    auto b = static_cast<std::uint32_t>(bits);
    float f = from_bits(b);
    if (std::isnan(f) || std::isinf(f)) continue;
    std::uint32_t down = b & 0xffff0000u;
    double lo = from_bits(down), hi = from_bits(down + 0x10000u);  // may be inf at the top
    double dist_lo = std::fabs(static_cast<double>(f) - lo), dist_hi = std::fabs(hi - static_cast<double>(f));
    if (std::isinf(hi)) dist_hi = std::fabs(std::ldexp(1.0, 128) - std::fabs(static_cast<double>(f)));
    std::uint16_t expected;
    if (dist_lo < dist_hi) expected = static_cast<std::uint16_t>(down >> 16);
    else if (dist_hi < dist_lo) expected = static_cast<std::uint16_t>((down >> 16) + 1);
    else expected = static_cast<std::uint16_t>((down >> 16) + ((down >> 16) & 1u));
    ASSERT_EQ(float_to_bf16(f), expected) << "bits=0x" << std::hex << b;
  }
}

}  // namespace
}  // namespace kolo
