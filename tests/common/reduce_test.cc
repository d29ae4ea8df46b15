// Reduction kernels against straightforward scalar references: every dtype x op,
// several input counts and lengths (block boundaries included), aliasing, and the
// edge cases (integer wraparound, Bool normalization, NaN/inf, fp16 rounding once).
#include "common/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/half.h"
#include "kolo/error.h"

namespace kolo {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr DataType kAllTypes[] = {DataType::UInt8,   DataType::Int8,     DataType::Int16,  DataType::Int32,
                                  DataType::Int64,   DataType::Float16,  DataType::BFloat16,
                                  DataType::Float32, DataType::Float64,  DataType::Bool};
constexpr ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

template <typename T>
T load(const Bytes& b, std::size_t i) {
  T v;
  std::memcpy(&v, b.data() + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
void store(Bytes& b, std::size_t i, T v) {
  std::memcpy(b.data() + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
T combine_integer(T a, T b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return static_cast<T>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
    case ReduceOp::Product: return static_cast<T>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
    case ReduceOp::Min: return std::min(a, b);
    case ReduceOp::Max: return std::max(a, b);
    default: return 0;
  }
}

template <typename F>
F combine_float(F a, F b, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return a + b;
    case ReduceOp::Product: return a * b;
    case ReduceOp::Min: return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b);
    case ReduceOp::Max: return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b);
    default: return 0;
  }
}

// The documented result of reducing element i of every input, left to right.
void reference_element(const std::vector<Bytes>& in, Bytes& out, std::size_t i, DataType dtype, ReduceOp op) {
  auto fold_int = [&]<typename T>(T) {
    T acc = load<T>(in[0], i);
    for (std::size_t k = 1; k < in.size(); ++k) acc = combine_integer(acc, load<T>(in[k], i), op);
    store(out, i, acc);
  };
  auto fold_float = [&]<typename F>(F) {
    F acc = load<F>(in[0], i);
    for (std::size_t k = 1; k < in.size(); ++k) acc = combine_float(acc, load<F>(in[k], i), op);
    store(out, i, acc);
  };
  auto fold_half = [&](auto to_float, auto from_float) {
    float acc = to_float(load<std::uint16_t>(in[0], i));
    for (std::size_t k = 1; k < in.size(); ++k) acc = combine_float(acc, to_float(load<std::uint16_t>(in[k], i)), op);
    store(out, i, from_float(acc));
  };
  switch (dtype) {
    case DataType::UInt8: return fold_int(std::uint8_t{});
    case DataType::Int8: return fold_int(std::int8_t{});
    case DataType::Int16: return fold_int(std::int16_t{});
    case DataType::Int32: return fold_int(std::int32_t{});
    case DataType::Int64: return fold_int(std::int64_t{});
    case DataType::Float32: return fold_float(float{});
    case DataType::Float64: return fold_float(double{});
    case DataType::Float16: return fold_half(fp16_to_float, float_to_fp16);
    case DataType::BFloat16: return fold_half(bf16_to_float, float_to_bf16);
    case DataType::Bool: {
      bool any = op == ReduceOp::Sum || op == ReduceOp::Max;
      bool acc = !any;
      for (const auto& b : in) acc = any ? (acc || b[i] != 0) : (acc && b[i] != 0);
      out[i] = acc;
      return;
    }
  }
}

// Random inputs in a range where products of up to 5 values stay finite.
Bytes random_input(DataType dtype, std::size_t count, std::mt19937& rng) {
  Bytes b(count * element_size(dtype));
  std::uniform_real_distribution<float> real(-4.0f, 4.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::size_t i = 0; i < count; ++i) {
    switch (dtype) {
      case DataType::UInt8:
      case DataType::Int8: b[i] = static_cast<std::uint8_t>(byte(rng)); break;
      case DataType::Bool: b[i] = static_cast<std::uint8_t>(byte(rng) < 128 ? 0 : byte(rng) % 3 + 1); break;
      case DataType::Int16: store<std::int16_t>(b, i, static_cast<std::int16_t>(rng())); break;
      case DataType::Int32: store<std::int32_t>(b, i, static_cast<std::int32_t>(rng())); break;
      case DataType::Int64:
        store<std::int64_t>(b, i, static_cast<std::int64_t>((std::uint64_t{rng()} << 32) | rng()));
        break;
      case DataType::Float32: store<float>(b, i, real(rng)); break;
      case DataType::Float64: store<double>(b, i, real(rng) * 1.000001); break;
      case DataType::Float16: store<std::uint16_t>(b, i, float_to_fp16(real(rng))); break;
      case DataType::BFloat16: store<std::uint16_t>(b, i, float_to_bf16(real(rng))); break;
    }
  }
  return b;
}

std::string describe(DataType dtype, ReduceOp op, int n, std::size_t count) {
  return std::string(to_string(dtype)) + " " + to_string(op) + " n=" + std::to_string(n) +
         " count=" + std::to_string(count);
}

TEST(Reduce, ReduceManyMatchesReferenceForEveryTypeAndOp) {
  std::mt19937 rng(1234);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      for (int n : {1, 2, 3, 5}) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1023},
                                  std::size_t{1024}, std::size_t{1025}, std::size_t{5000}}) {
          std::vector<Bytes> in;
          std::vector<const void*> ptrs;
          for (int k = 0; k < n; ++k) in.push_back(random_input(dtype, count, rng));
          for (auto& b : in) ptrs.push_back(b.data());
          Bytes expected(count * element_size(dtype)), got(expected.size(), 0xee);
          for (std::size_t i = 0; i < count; ++i) reference_element(in, expected, i, dtype, op);
          reduce_many(got.data(), ptrs.data(), n, count, dtype, op);
          ASSERT_EQ(got, expected) << describe(dtype, op, n, count);

          // In place: the output may be any one of the inputs (exactly).
          for (int alias : {0, n - 1}) {
            std::vector<Bytes> copy = in;
            std::vector<const void*> copy_ptrs;
            for (auto& b : copy) copy_ptrs.push_back(b.data());
            reduce_many(copy[alias].data(), copy_ptrs.data(), n, count, dtype, op);
            ASSERT_EQ(copy[alias], expected) << describe(dtype, op, n, count) << " aliasing input " << alias;
          }
        }
      }
    }
  }
}

TEST(Reduce, ReduceIntoMatchesPairwiseReference) {
  std::mt19937 rng(99);
  for (DataType dtype : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      const std::size_t count = 3001;
      std::vector<Bytes> in = {random_input(dtype, count, rng), random_input(dtype, count, rng)};
      Bytes expected(count * element_size(dtype));
      for (std::size_t i = 0; i < count; ++i) reference_element(in, expected, i, dtype, op);
      Bytes dst = in[0];
      reduce_into(dst.data(), in[1].data(), count, dtype, op);
      ASSERT_EQ(dst, expected) << describe(dtype, op, 2, count);
    }
  }
}

TEST(Reduce, IntegerSumAndProductWrapAround) {
  std::int8_t a8[] = {127, -128, 100};
  std::int8_t b8[] = {1, -1, 100};
  reduce_into(a8, b8, 3, DataType::Int8, ReduceOp::Sum);
  EXPECT_EQ(a8[0], -128);
  EXPECT_EQ(a8[1], 127);
  EXPECT_EQ(a8[2], static_cast<std::int8_t>(200 - 256));

  std::uint8_t u[] = {255, 16};
  std::uint8_t v[] = {2, 16};
  reduce_into(u, v, 2, DataType::UInt8, ReduceOp::Product);
  EXPECT_EQ(u[0], 254);
  EXPECT_EQ(u[1], 0);

  std::int32_t i32[] = {std::numeric_limits<std::int32_t>::max(), 65536};
  std::int32_t j32[] = {1, 65536};
  reduce_into(i32, j32, 2, DataType::Int32, ReduceOp::Sum);
  EXPECT_EQ(i32[0], std::numeric_limits<std::int32_t>::min());
  reduce_into(i32 + 1, j32 + 1, 1, DataType::Int32, ReduceOp::Product);
  EXPECT_EQ(i32[1], 0);

  std::int64_t i64[] = {std::numeric_limits<std::int64_t>::min()};
  std::int64_t j64[] = {-1};
  reduce_into(i64, j64, 1, DataType::Int64, ReduceOp::Sum);
  EXPECT_EQ(i64[0], std::numeric_limits<std::int64_t>::max());
}

TEST(Reduce, BoolIsLogicalAndGivesZeroOrOne) {
  std::uint8_t a[] = {0, 0, 2, 255, 7};
  std::uint8_t b[] = {0, 9, 0, 128, 1};
  const void* srcs[] = {a, b};
  std::uint8_t out[5];
  reduce_many(out, srcs, 2, 5, DataType::Bool, ReduceOp::Sum);
  EXPECT_EQ(Bytes(out, out + 5), (Bytes{0, 1, 1, 1, 1}));
  reduce_many(out, srcs, 2, 5, DataType::Bool, ReduceOp::Max);
  EXPECT_EQ(Bytes(out, out + 5), (Bytes{0, 1, 1, 1, 1}));
  reduce_many(out, srcs, 2, 5, DataType::Bool, ReduceOp::Min);
  EXPECT_EQ(Bytes(out, out + 5), (Bytes{0, 0, 0, 1, 1}));
  reduce_many(out, srcs, 2, 5, DataType::Bool, ReduceOp::Product);
  EXPECT_EQ(Bytes(out, out + 5), (Bytes{0, 0, 0, 1, 1}));
  reduce_many(out, srcs, 1, 5, DataType::Bool, ReduceOp::Sum);  // a single input is normalized too
  EXPECT_EQ(Bytes(out, out + 5), (Bytes{0, 0, 1, 1, 1}));
}

TEST(Reduce, FloatSpecialValues) {
  const float inf = HUGE_VALF, nan = std::numeric_limits<float>::quiet_NaN();
  float a[] = {inf, inf, nan, 1.0f, 1.0f, nan};
  float b[] = {1.0f, -inf, 1.0f, nan, 2.0f, nan};
  float sum[6];
  const void* srcs[] = {a, b};
  reduce_many(sum, srcs, 2, 6, DataType::Float32, ReduceOp::Sum);
  EXPECT_EQ(sum[0], inf);
  EXPECT_TRUE(std::isnan(sum[1]));
  EXPECT_TRUE(std::isnan(sum[2]));
  EXPECT_TRUE(std::isnan(sum[3]));
  EXPECT_EQ(sum[4], 3.0f);
  for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) {
    float out[6];
    reduce_many(out, srcs, 2, 6, DataType::Float32, op);
    EXPECT_TRUE(std::isnan(out[2])) << to_string(op) << ": NaN first must propagate";
    EXPECT_TRUE(std::isnan(out[3])) << to_string(op) << ": NaN second must propagate";
    EXPECT_TRUE(std::isnan(out[5]));
    EXPECT_EQ(out[4], op == ReduceOp::Min ? 1.0f : 2.0f);
    EXPECT_EQ(out[1], op == ReduceOp::Min ? -inf : inf);
  }
  // The same through the half types (they accumulate in float).
  for (DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    auto to_half = [&](float f) { return dtype == DataType::Float16 ? float_to_fp16(f) : float_to_bf16(f); };
    auto is_nan = [&](std::uint16_t h) {
      return std::isnan(dtype == DataType::Float16 ? fp16_to_float(h) : bf16_to_float(h));
    };
    std::vector<std::uint16_t> ha(20), hb(20), out(20);  // longer than one F16C vector
    for (int i = 0; i < 20; ++i) {
      ha[i] = to_half(i % 2 ? nan : inf);
      hb[i] = to_half(i % 3 ? -inf : 1.0f);
    }
    const void* hsrcs[] = {ha.data(), hb.data()};
    for (ReduceOp op : kAllOps) {
      reduce_many(out.data(), hsrcs, 2, 20, dtype, op);
      for (int i = 0; i < 20; ++i) {
        if (i % 2) {
          EXPECT_TRUE(is_nan(out[i])) << to_string(dtype) << " " << to_string(op) << " i=" << i;
        }
      }
    }
    reduce_many(out.data(), hsrcs, 2, 20, dtype, ReduceOp::Sum);
    EXPECT_TRUE(is_nan(out[2]));  // inf + -inf
    EXPECT_EQ(out[0], to_half(inf));
  }
}

TEST(Reduce, HalfTypesAccumulateInFloatAndRoundOnce) {
  // fp16 spacing at 2048 is 2: 2048 + 1 + 1 is 2048 when rounded at every step,
  // 2050 when rounded once.
  std::uint16_t big = float_to_fp16(2048.0f), one = float_to_fp16(1.0f);
  std::vector<std::uint16_t> a(37, big), b(37, one), c(37, one), out(37);
  const void* srcs[] = {a.data(), b.data(), c.data()};
  reduce_many(out.data(), srcs, 3, out.size(), DataType::Float16, ReduceOp::Sum);
  for (auto h : out) ASSERT_EQ(fp16_to_float(h), 2050.0f);
  // bf16 spacing at 256 is 2.
  std::uint16_t bbig = float_to_bf16(256.0f), bone = float_to_bf16(1.0f);
  std::vector<std::uint16_t> x(37, bbig), y(37, bone), z(37, bone);
  const void* bsrcs[] = {x.data(), y.data(), z.data()};
  reduce_many(out.data(), bsrcs, 3, out.size(), DataType::BFloat16, ReduceOp::Sum);
  for (auto h : out) ASSERT_EQ(bf16_to_float(h), 258.0f);
}

// The vectorized bf16 store must round exactly like float_to_bf16 on every kind
// of float (ties, carries into the exponent, overflow to inf, NaN payloads).
TEST(Reduce, Bf16KernelRoundingMatchesHalfHeader) {
  std::vector<float> values;
  for (std::uint64_t bits = 0; bits < (1ull << 32); bits += 40009) {
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  }
  for (std::uint32_t tie : {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x7f7f8000u, 0x00008000u, 0x7f800001u, 0xff800001u})
    values.push_back(std::bit_cast<float>(tie));
  // A bf16 "sum" of v and 0 is the conversion of v (after an exact float load).
  // Build inputs whose float sum is exactly v: v's high half plus its low half.
  for (float v : values) {
    if (std::isnan(v) || std::isinf(v)) continue;
    std::uint32_t bits = std::bit_cast<std::uint32_t>(v);
    float high = std::bit_cast<float>(bits & 0xffff0000u);
    float low = v - high;  // exact
    std::uint16_t hb = float_to_bf16(high), lb = float_to_bf16(low);
    if (bf16_to_float(lb) != low) continue;  // low part not representable: skip
    std::uint16_t out;
    const void* srcs[] = {&hb, &lb};
    reduce_many(&out, srcs, 2, 1, DataType::BFloat16, ReduceOp::Sum);
    ASSERT_EQ(out, float_to_bf16(high + low)) << std::hex << bits;
  }
}

TEST(Reduce, AverageAndInvalidTypesAreRejected) {
  float a[1] = {1}, b[1] = {2};
  EXPECT_THROW(reduce_into(a, b, 1, DataType::Float32, ReduceOp::Average), InvalidArgumentError);
  EXPECT_THROW(reduce_into(a, b, 1, static_cast<DataType>(42), ReduceOp::Sum), InvalidArgumentError);
  const void* none[1] = {a};
  EXPECT_THROW(reduce_many(a, none, 0, 1, DataType::Float32, ReduceOp::Sum), InvalidArgumentError);
}

TEST(Reduce, ScaleFloatingTypes) {
  std::vector<float> f = {1.0f, -3.0f, 0.5f};
  scale(f.data(), f.size(), DataType::Float32, 0.25);
  EXPECT_EQ(f, (std::vector<float>{0.25f, -0.75f, 0.125f}));
  std::vector<double> d = {1.0, 3.0};
  scale(d.data(), d.size(), DataType::Float64, 1.0 / 3.0);
  EXPECT_EQ(d[1], 3.0 * (1.0 / 3.0));
  EXPECT_EQ(d[0], 1.0 / 3.0);

  std::mt19937 rng(5);
  for (DataType dtype : {DataType::Float16, DataType::BFloat16}) {
    Bytes data = random_input(dtype, 1000, rng);
    Bytes expected = data;
    for (std::size_t i = 0; i < 1000; ++i) {
      auto h = load<std::uint16_t>(data, i);
      float v = (dtype == DataType::Float16 ? fp16_to_float(h) : bf16_to_float(h)) * 0.3f;
      store<std::uint16_t>(expected, i, dtype == DataType::Float16 ? float_to_fp16(v) : float_to_bf16(v));
    }
    scale(data.data(), 1000, dtype, 0.3);
    EXPECT_EQ(data, expected) << to_string(dtype);
  }
  bool b[1] = {true};
  EXPECT_THROW(scale(b, 1, DataType::Bool, 0.5), InvalidArgumentError);
}

// Horovod's rule: in double, truncated toward zero; kolo holds what leaves the
// type's range at its bound.
TEST(Reduce, ScaleIntegersInDoubleTruncating) {
  std::int32_t i[] = {7, -7, 5, 3};
  scale(i, 4, DataType::Int32, 0.5);
  EXPECT_EQ((std::vector<std::int32_t>(i, i + 4)), (std::vector<std::int32_t>{3, -3, 2, 1}));
  std::int64_t l[] = {9, -10, std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()};
  scale(l, 4, DataType::Int64, 1.0 / 3.0);
  EXPECT_EQ(l[0], 3);
  EXPECT_EQ(l[1], -3);
  EXPECT_EQ(l[2], 3074457345618258432);  // 2^63 / 3 in double
  EXPECT_EQ(l[3], -3074457345618258432);
  std::uint8_t u[] = {200, 3};
  scale(u, 2, DataType::UInt8, 1.5);  // 300 is past uint8's top
  EXPECT_EQ(u[0], 255);
  EXPECT_EQ(u[1], 4);
  std::int8_t s[] = {-100, 100};
  scale(s, 2, DataType::Int8, 2.0);
  EXPECT_EQ(s[0], -128);
  EXPECT_EQ(s[1], 127);
  std::int16_t h[] = {1000};
  scale(h, 1, DataType::Int16, -2.5);
  EXPECT_EQ(h[0], -2500);
  std::int64_t big[] = {std::numeric_limits<std::int64_t>::max()};
  scale(big, 1, DataType::Int64, 4.0);
  EXPECT_EQ(big[0], std::numeric_limits<std::int64_t>::max());
}

TEST(Reduce, DivideIntegerTruncatesTowardZero) {
  std::int32_t a[] = {7, -7, 8, std::numeric_limits<std::int32_t>::min()};
  divide_integer(a, 4, DataType::Int32, 2);
  EXPECT_EQ(a[0], 3);
  EXPECT_EQ(a[1], -3);
  EXPECT_EQ(a[2], 4);
  EXPECT_EQ(a[3], std::numeric_limits<std::int32_t>::min() / 2);

  std::int64_t m[] = {std::numeric_limits<std::int64_t>::min(), 5};
  divide_integer(m, 2, DataType::Int64, -1);  // must not trap
  EXPECT_EQ(m[0], std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(m[1], -5);

  std::uint8_t u[] = {255, 3};
  divide_integer(u, 2, DataType::UInt8, 4);
  EXPECT_EQ(u[0], 63);
  EXPECT_EQ(u[1], 0);
  std::int8_t s[] = {-128, 127};
  divide_integer(s, 2, DataType::Int8, 3);
  EXPECT_EQ(s[0], -42);
  EXPECT_EQ(s[1], 42);

  EXPECT_THROW(divide_integer(a, 1, DataType::Int32, 0), InvalidArgumentError);
  float f[1] = {1};
  EXPECT_THROW(divide_integer(f, 1, DataType::Float32, 2), InvalidArgumentError);
  EXPECT_THROW(divide_integer(u, 1, DataType::Bool, 2), InvalidArgumentError);
}

}  // namespace
}  // namespace kolo
