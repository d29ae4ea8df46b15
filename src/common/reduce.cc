// Reduction and scaling kernels for every DataType.
//
// The kernels are plain element-wise loops that GCC auto-vectorizes. Two rules
// make them correct and fast at once:
//  - `dst` may be exactly one of the inputs (in-place collectives pass the output
//    buffer as one input). Every loop computes out[i] from a[i] and b[i] only,
//    so exact aliasing carries no dependence between iterations, which is what
//    `#pragma GCC ivdep` promises the vectorizer (no runtime alias checks, no
//    scalar fallback);
//  - the combination order of every element is srcs[0], srcs[1], ..., srcs[n-1],
//    so every rank that runs a kernel on the same inputs gets the same bits.
// With more than two inputs, or with Float16/BFloat16 (which accumulate all
// inputs in float32 and round once), partial results live in an L1-sized
// accumulator block.
//
// Semantics beyond the header:
//  - integer Sum/Product wrap (computed in the unsigned type: no UB);
//  - Bool: any non-zero byte is true; Sum/Max = OR, Min/Product = AND; results 0/1;
//  - floating Min/Max propagate NaN (like torch.minimum/maximum): if any input of
//    an element is NaN, the result is NaN.
//
// The per-type entry points are compiled three times (x86-64-v4, i.e. AVX-512;
// AVX2; baseline x86-64) and picked at load time (target_clones). Float16
// conversions use F16C when the CPU has it; F16C rounds exactly like half.h.
#include "common/reduce.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
// No clones under ThreadSanitizer: it instruments the clones' resolver (an ifunc),
// which the dynamic loader runs while relocating libkolo, before TSan is
// initialized, and the program crashes before main.
#if defined(__SANITIZE_THREAD__)
#define KOLO_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KOLO_NO_CLONES 1
#endif
#endif
#if defined(__x86_64__) && !defined(KOLO_NO_CLONES)
#define KOLO_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define KOLO_CLONES
#endif

#include "common/half.h"
#include "kolo/error.h"

namespace kolo {
namespace {

#define KOLO_INLINE [[gnu::always_inline]] inline

// Elements per accumulator block: 4 KiB of float32, well inside L1.
constexpr std::size_t kBlock = 1024;

// ---- element ops ------------------------------------------------------------------

struct SumOp {
  template <typename T>
  KOLO_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct ProductOp {
  template <typename T>
  KOLO_INLINE static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// `a != a` is the NaN test; it is false for integers, so one form serves both.
struct MinOp {
  template <typename T>
  KOLO_INLINE static T apply(T a, T b) {
    return (a < b || a != a) ? a : b;
  }
};

struct MaxOp {
  template <typename T>
  KOLO_INLINE static T apply(T a, T b) {
    return (a > b || a != a) ? a : b;
  }
};

// Bool ops normalize as they combine, so the results are 0/1.
struct OrOp {
  KOLO_INLINE static std::uint8_t apply(std::uint8_t a, std::uint8_t b) { return (a != 0) | (b != 0); }
};

struct AndOp {
  KOLO_INLINE static std::uint8_t apply(std::uint8_t a, std::uint8_t b) { return (a != 0) & (b != 0); }
};

// out[i] = a[i] op b[i]. `out` may equal `a` or `b` exactly (see the top comment).
template <typename Op, typename T>
KOLO_INLINE void combine(T* out, const T* a, const T* b, std::size_t len) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < len; ++i) out[i] = Op::apply(a[i], b[i]);
}

// ---- types computed as stored: integers, float, double, Bool -------------------------

template <typename T, typename Op>
KOLO_INLINE void reduce_stored(void* dst_v, const void* const* srcs_v, int n, std::size_t count) {
  auto* dst = static_cast<T*>(dst_v);
  auto src = [&](int k) { return static_cast<const T*>(srcs_v[k]); };
  if (n == 1) {
    if constexpr (std::is_same_v<Op, OrOp> || std::is_same_v<Op, AndOp>) {
      combine<Op>(dst, src(0), src(0), count);  // a|a and a&a normalize Bool to 0/1
    } else if (dst != src(0)) {
      std::memcpy(dst, src(0), count * sizeof(T));
    }
    return;
  }
  if (n == 2) {
    combine<Op>(dst, src(0), src(1), count);
    return;
  }
  // The output may alias any input, so partial results go to a private block
  // and only the last step writes `dst`.
  alignas(64) T acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    combine<Op>(acc, src(0) + base, src(1) + base, len);
    for (int k = 2; k < n - 1; ++k) combine<Op>(acc, acc, src(k) + base, len);
    combine<Op>(dst + base, acc, src(n - 1) + base, len);
  }
}

// ---- half types: accumulate in float32 blocks, round once --------------------------

struct BFloat16Codec {
  KOLO_INLINE static float widen(std::uint16_t h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }
  // Branch-free float_to_bf16 (half.h) so that loops vectorize; the tests check
  // that both agree.
  KOLO_INLINE static std::uint16_t narrow(float f) {
    std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
    std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    std::uint32_t quiet_nan = (bits >> 16) | 0x40u;
    // A signed compare (the masked value is non-negative) vectorizes to one
    // instruction; AVX2 has no unsigned one.
    bool is_nan = static_cast<std::int32_t>(bits & 0x7fffffffu) > 0x7f800000;
    return static_cast<std::uint16_t>(is_nan ? quiet_nan : rounded);
  }
  KOLO_INLINE static void load(float* __restrict out, const std::uint16_t* __restrict in, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = widen(in[i]);
  }
  KOLO_INLINE static void store(std::uint16_t* __restrict out, const float* __restrict in, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow(in[i]);
  }
  // Two inputs in one pass (the common case: two ranks, reduce_into).
  template <typename Op>
  KOLO_INLINE static void reduce_pair(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b,
                                      std::size_t n) {
#pragma GCC ivdep
    for (std::size_t i = 0; i < n; ++i) out[i] = narrow(Op::apply(widen(a[i]), widen(b[i])));
  }
};

void fp16_load_soft(float* out, const std::uint16_t* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}
void fp16_store_soft(std::uint16_t* out, const float* in, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void fp16_load_f16c(float* out, const std::uint16_t* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  fp16_load_soft(out + i, in + i, n - i);
}
__attribute__((target("avx2,f16c"))) void fp16_store_f16c(std::uint16_t* out, const float* in, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  fp16_store_soft(out + i, in + i, n - i);
}
#endif

using Fp16PairFn = void (*)(std::uint16_t*, const std::uint16_t*, const std::uint16_t*, std::size_t);

template <typename Op>
void fp16_pair_soft(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = float_to_fp16(Op::apply(fp16_to_float(a[i]), fp16_to_float(b[i])));
}

#if defined(__x86_64__)
#define KOLO_F16C __attribute__((target("avx2,f16c")))
KOLO_F16C inline __m256 apply_vector(SumOp, __m256 a, __m256 b) { return _mm256_add_ps(a, b); }
KOLO_F16C inline __m256 apply_vector(ProductOp, __m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
KOLO_F16C inline __m256 apply_vector(MinOp, __m256 a, __m256 b) {
  __m256 take_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(b, a, take_a);
}
KOLO_F16C inline __m256 apply_vector(MaxOp, __m256 a, __m256 b) {
  __m256 take_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  return _mm256_blendv_ps(b, a, take_a);
}

// Two Float16 inputs in one pass, eight lanes at a time; both lanes' inputs are
// loaded before the output is stored, so `out` may be `a` or `b`.
template <typename Op>
KOLO_F16C void fp16_pair_f16c(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    __m128i r = _mm256_cvtps_ph(apply_vector(Op{}, x, y), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), r);
  }
  fp16_pair_soft<Op>(out + i, a + i, b + i, n - i);
}
#endif

struct Fp16Converters {
  void (*load)(float*, const std::uint16_t*, std::size_t) = fp16_load_soft;
  void (*store)(std::uint16_t*, const float*, std::size_t) = fp16_store_soft;
  Fp16PairFn sum = fp16_pair_soft<SumOp>;
  Fp16PairFn product = fp16_pair_soft<ProductOp>;
  Fp16PairFn min = fp16_pair_soft<MinOp>;
  Fp16PairFn max = fp16_pair_soft<MaxOp>;
  Fp16Converters() {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2")) {
      load = fp16_load_f16c;
      store = fp16_store_f16c;
      sum = fp16_pair_f16c<SumOp>;
      product = fp16_pair_f16c<ProductOp>;
      min = fp16_pair_f16c<MinOp>;
      max = fp16_pair_f16c<MaxOp>;
    }
#endif
  }
};

const Fp16Converters& fp16_converters() {
  static const Fp16Converters converters;
  return converters;
}

struct Float16Codec {
  static void load(float* out, const std::uint16_t* in, std::size_t n) { fp16_converters().load(out, in, n); }
  static void store(std::uint16_t* out, const float* in, std::size_t n) { fp16_converters().store(out, in, n); }
  template <typename Op>
  static void reduce_pair(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* b, std::size_t n) {
    const auto& c = fp16_converters();
    Fp16PairFn fn = std::is_same_v<Op, SumOp>       ? c.sum
                    : std::is_same_v<Op, ProductOp> ? c.product
                    : std::is_same_v<Op, MinOp>     ? c.min
                                                    : c.max;
    fn(out, a, b, n);
  }
};

template <typename Codec, typename Op>
KOLO_INLINE void reduce_half(void* dst_v, const void* const* srcs_v, int n, std::size_t count) {
  auto* dst = static_cast<std::uint16_t*>(dst_v);
  auto src = [&](int k) { return static_cast<const std::uint16_t*>(srcs_v[k]); };
  if (n == 2) {
    Codec::template reduce_pair<Op>(dst, src(0), src(1), count);
    return;
  }
  alignas(64) float acc[kBlock];
  alignas(64) float in[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    Codec::load(acc, src(0) + base, len);
    for (int k = 1; k < n; ++k) {
      Codec::load(in, src(k) + base, len);
      combine<Op>(acc, acc, in, len);
    }
    Codec::store(dst + base, acc, len);
  }
}

// ---- dispatch ---------------------------------------------------------------------------

[[noreturn]] void bad_op(ReduceOp op) {
  throw InvalidArgumentError(std::string("reduction kernels do not take op ") + to_string(op) +
                             " (Average is Sum followed by a division)");
}

template <typename T>
struct Stored {
  template <typename Op>
  KOLO_INLINE static void run(void* d, const void* const* s, int n, std::size_t c) { reduce_stored<T, Op>(d, s, n, c); }
};

template <typename Codec>
struct Half {
  template <typename Op>
  KOLO_INLINE static void run(void* d, const void* const* s, int n, std::size_t c) {
    reduce_half<Codec, Op>(d, s, n, c);
  }
};

template <typename Kernel>
KOLO_INLINE void dispatch_op(void* dst, const void* const* srcs, int n, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return Kernel::template run<SumOp>(dst, srcs, n, count);
    case ReduceOp::Product: return Kernel::template run<ProductOp>(dst, srcs, n, count);
    case ReduceOp::Min: return Kernel::template run<MinOp>(dst, srcs, n, count);
    case ReduceOp::Max: return Kernel::template run<MaxOp>(dst, srcs, n, count);
    default: bad_op(op);
  }
}

// One entry point per dtype, so that target_clones sees non-template functions.
#define KOLO_REDUCE_ENTRY(name, kernel)                                                               \
  KOLO_CLONES void name(void* dst, const void* const* srcs, int n, std::size_t count, ReduceOp op) { \
    dispatch_op<kernel>(dst, srcs, n, count, op);                                                     \
  }

KOLO_REDUCE_ENTRY(reduce_many_u8, Stored<std::uint8_t>)
KOLO_REDUCE_ENTRY(reduce_many_i8, Stored<std::int8_t>)
KOLO_REDUCE_ENTRY(reduce_many_i16, Stored<std::int16_t>)
KOLO_REDUCE_ENTRY(reduce_many_i32, Stored<std::int32_t>)
KOLO_REDUCE_ENTRY(reduce_many_i64, Stored<std::int64_t>)
KOLO_REDUCE_ENTRY(reduce_many_f32, Stored<float>)
KOLO_REDUCE_ENTRY(reduce_many_f64, Stored<double>)
KOLO_REDUCE_ENTRY(reduce_many_bf16, Half<BFloat16Codec>)
KOLO_REDUCE_ENTRY(reduce_many_f16, Half<Float16Codec>)
#undef KOLO_REDUCE_ENTRY

KOLO_CLONES void reduce_many_bool(void* dst, const void* const* srcs, int n, std::size_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Max: return reduce_stored<std::uint8_t, OrOp>(dst, srcs, n, count);
    case ReduceOp::Min:
    case ReduceOp::Product: return reduce_stored<std::uint8_t, AndOp>(dst, srcs, n, count);
    default: bad_op(op);
  }
}

// ---- scaling ------------------------------------------------------------------------------

template <typename T>
KOLO_INLINE void scale_stored(T* __restrict data, std::size_t count, T factor) {
  for (std::size_t i = 0; i < count; ++i) data[i] *= factor;
}

template <typename Codec>
KOLO_INLINE void scale_half(std::uint16_t* data, std::size_t count, float factor) {
  alignas(64) float block[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t len = std::min(kBlock, count - base);
    Codec::load(block, data + base, len);
    for (std::size_t i = 0; i < len; ++i) block[i] *= factor;
    Codec::store(data + base, block, len);
  }
}

KOLO_CLONES void scale_f32(float* data, std::size_t count, float factor) { scale_stored(data, count, factor); }
KOLO_CLONES void scale_f64(double* data, std::size_t count, double factor) { scale_stored(data, count, factor); }
KOLO_CLONES void scale_bf16(std::uint16_t* data, std::size_t count, float factor) {
  scale_half<BFloat16Codec>(data, count, factor);
}
KOLO_CLONES void scale_f16(std::uint16_t* data, std::size_t count, float factor) {
  scale_half<Float16Codec>(data, count, factor);
}

// Integers are scaled in double and truncated toward zero, as Horovod does; a
// result beyond the type's range is held at its bound (converting it would be
// undefined behaviour).
template <typename T>
void scale_integer(T* data, std::size_t count, double factor) {
  const double low = static_cast<double>(std::numeric_limits<T>::min());
  const double above = std::ldexp(1.0, std::numeric_limits<T>::digits);  // the first value past the top
  for (std::size_t i = 0; i < count; ++i) {
    const double v = std::trunc(static_cast<double>(data[i]) * factor);
    if (v >= above) {
      data[i] = std::numeric_limits<T>::max();
    } else if (v < low) {
      data[i] = std::numeric_limits<T>::min();
    } else {
      data[i] = static_cast<T>(v);
    }
  }
}

// ---- integer division ------------------------------------------------------------------

// Truncating division that never overflows: x / -1 is computed as a wrapping
// negation (INT_MIN / -1 is undefined behaviour in C++).
template <typename T>
void divide_plain(T* data, std::size_t count, std::int64_t divisor) {
  if (divisor == -1) {
    using U = std::make_unsigned_t<T>;
    for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(static_cast<U>(0u - static_cast<U>(data[i])));
    return;
  }
  for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<T>(static_cast<std::int64_t>(data[i]) / divisor);
}

}  // namespace

void reduce_many(void* dst, const void* const* srcs, int n, std::size_t count, DataType dtype, ReduceOp op) {
  if (n < 1) throw InvalidArgumentError("reduce_many needs at least one input, got " + std::to_string(n));
  if (count == 0) return;
  // Checked here rather than in the cloned kernels, which must not throw: under
  // GCC 12's AddressSanitizer an exception leaving a target_clones function is
  // never caught (std::terminate).
  if (op != ReduceOp::Sum && op != ReduceOp::Product && op != ReduceOp::Min && op != ReduceOp::Max) bad_op(op);
  switch (dtype) {
    case DataType::UInt8: return reduce_many_u8(dst, srcs, n, count, op);
    case DataType::Int8: return reduce_many_i8(dst, srcs, n, count, op);
    case DataType::Int16: return reduce_many_i16(dst, srcs, n, count, op);
    case DataType::Int32: return reduce_many_i32(dst, srcs, n, count, op);
    case DataType::Int64: return reduce_many_i64(dst, srcs, n, count, op);
    case DataType::Float16: return reduce_many_f16(dst, srcs, n, count, op);
    case DataType::BFloat16: return reduce_many_bf16(dst, srcs, n, count, op);
    case DataType::Float32: return reduce_many_f32(dst, srcs, n, count, op);
    case DataType::Float64: return reduce_many_f64(dst, srcs, n, count, op);
    case DataType::Bool: return reduce_many_bool(dst, srcs, n, count, op);
  }
  throw InvalidArgumentError("invalid data type " + std::to_string(static_cast<int>(dtype)));
}

void reduce_into(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOp op) {
  const void* srcs[2] = {dst, src};
  reduce_many(dst, srcs, 2, count, dtype, op);
}

void scale(void* data, std::size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::Float32: return scale_f32(static_cast<float*>(data), count, static_cast<float>(factor));
    case DataType::Float64: return scale_f64(static_cast<double*>(data), count, factor);
    case DataType::BFloat16: return scale_bf16(static_cast<std::uint16_t*>(data), count, static_cast<float>(factor));
    case DataType::Float16: return scale_f16(static_cast<std::uint16_t*>(data), count, static_cast<float>(factor));
    case DataType::UInt8: return scale_integer(static_cast<std::uint8_t*>(data), count, factor);
    case DataType::Int8: return scale_integer(static_cast<std::int8_t*>(data), count, factor);
    case DataType::Int16: return scale_integer(static_cast<std::int16_t*>(data), count, factor);
    case DataType::Int32: return scale_integer(static_cast<std::int32_t*>(data), count, factor);
    case DataType::Int64: return scale_integer(static_cast<std::int64_t*>(data), count, factor);
    default: break;
  }
  throw InvalidArgumentError(std::string("scale() takes numeric data, not ") + to_string(dtype));
}

void divide_integer(void* data, std::size_t count, DataType dtype, std::int64_t divisor) {
  if (divisor == 0) throw InvalidArgumentError("divide_integer: division by zero");
  switch (dtype) {
    case DataType::UInt8: return divide_plain(static_cast<std::uint8_t*>(data), count, divisor);
    case DataType::Int8: return divide_plain(static_cast<std::int8_t*>(data), count, divisor);
    case DataType::Int16: return divide_plain(static_cast<std::int16_t*>(data), count, divisor);
    case DataType::Int32: return divide_plain(static_cast<std::int32_t*>(data), count, divisor);
    case DataType::Int64: return divide_plain(static_cast<std::int64_t*>(data), count, divisor);
    default: break;
  }
  throw InvalidArgumentError(std::string("divide_integer() takes integer data, not ") + to_string(dtype));
}

}  // namespace kolo
