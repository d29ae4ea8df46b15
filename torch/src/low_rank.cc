// PowerSGD's passes over a gradient matrix (low_rank.h). Dot products keep
// eight partial sums, one per lane, added in a fixed order at the end: the
// compiler vectorizes them without reordering floating-point additions, so the
// result does not depend on how it vectorized.
#include "low_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kolo::torch::detail {

namespace {

constexpr std::int64_t kLanes = 8;

template <typename T>
T dot(const T* a, const T* b, std::int64_t n) {
  T lanes[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += a[j + l] * b[j + l];
  }
  T sum = 0;
  for (std::int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

// Rows worked on together in project_back and reconstruct: each value of Qt
// loaded (and stored) serves this many rows.
constexpr std::int64_t kGroup = 4;

// row = sum over k of weights[k] Qt[k]: one row of P Qt.
template <typename T>
void combine(const T* weights, const T* qt, T* row, std::int64_t cols, std::int64_t r) {
  for (std::int64_t j = 0; j < cols; ++j) row[j] = weights[0] * qt[j];
  for (std::int64_t k = 1; k < r; ++k) {
    const T weight = weights[k];
    const T* q = qt + k * cols;
    for (std::int64_t j = 0; j < cols; ++j) row[j] += weight * q[j];
  }
}

// Column x of P Qt's row whose P row is w, r known when compiling: the terms
// in k order, as combine() adds them.
template <typename T, int R>
T approximation_at(const T* w, const T* qt, std::int64_t x, std::int64_t cols) {
  T a = w[0] * qt[x];
  for (int k = 1; k < R; ++k) a += w[k] * qt[k * cols + x];
  return a;
}

// fold_and_project's row with the last step's factors, r known when
// compiling: the same operations in the same order as the general loops
// below, in one pass over the row. (The rows without last factors, a first
// step, take the general loops, which the compiler does better for them.)
template <typename T, int R>
void fold_last_and_project_row(const T* grad, T* row, const T* last_p, const T* last_qt, const T* qt, T* p,
                               std::int64_t cols) {
  auto folded = [&](std::int64_t x) { return grad[x] + (row[x] - approximation_at<T, R>(last_p, last_qt, x, cols)); };
  T lanes[R][kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= cols; j += kLanes) {
    T v[kLanes];
    for (std::int64_t l = 0; l < kLanes; ++l) v[l] = folded(j + l);
    for (std::int64_t l = 0; l < kLanes; ++l) row[j + l] = v[l];
    for (int k = 0; k < R; ++k) {
      const T* q = qt + k * cols + j;
      for (std::int64_t l = 0; l < kLanes; ++l) lanes[k][l] += v[l] * q[l];
    }
  }
  const std::int64_t tail = j;
  for (; j < cols; ++j) row[j] = folded(j);
  for (int k = 0; k < R; ++k) {
    T sum = 0;
    for (std::int64_t l = 0; l < kLanes; ++l) sum += lanes[k][l];
    for (std::int64_t x = tail; x < cols; ++x) sum += row[x] * qt[k * cols + x];
    p[k] = sum;
  }
}

template <typename T, int R>
bool fold_last_and_project(const T* g, T* m, Approximation<T> last, const T* qt, T* p, std::int64_t rows,
                           std::int64_t cols) {
  if (last.p == nullptr || last.r != R || m == g) return false;
  for (std::int64_t i = 0; i < rows; ++i) {
    fold_last_and_project_row<T, R>(g + i * cols, m + i * cols, last.p + i * R, last.qt, qt, p + i * R, cols);
  }
  return true;
}

// reconstruct for r known when compiling, kGroup rows at a time: each value of
// Qt loaded serves them all.
template <typename T, int R>
void reconstruct_fixed(T* __restrict g, const T* __restrict p, const T* __restrict qt, std::int64_t rows,
                       std::int64_t cols) {
  std::int64_t i = 0;
  for (; i + kGroup <= rows; i += kGroup) {
    T w[kGroup][R];
    for (std::int64_t n = 0; n < kGroup; ++n) {
      for (int k = 0; k < R; ++k) w[n][k] = p[(i + n) * R + k];
    }
    T* out = g + i * cols;
    for (std::int64_t x = 0; x < cols; ++x) {
      for (std::int64_t n = 0; n < kGroup; ++n) out[n * cols + x] = approximation_at<T, R>(w[n], qt, x, cols);
    }
  }
  for (; i < rows; ++i) {
    T* row = g + i * cols;
    for (std::int64_t x = 0; x < cols; ++x) row[x] = approximation_at<T, R>(p + i * R, qt, x, cols);
  }
}

// Qt += P^T M over rows [begin, end), one row at a time: each row's terms in
// row order, the order every path of project_back adds them in.
template <typename T>
void project_rows_back(const T* m, const T* p, T* qt, std::int64_t begin, std::int64_t end, std::int64_t cols,
                       std::int64_t r) {
  for (std::int64_t i = begin; i < end; ++i) {
    const T* row = m + i * cols;
    for (std::int64_t k = 0; k < r; ++k) {
      const T weight = p[i * r + k];
      T* out = qt + k * cols;
      for (std::int64_t j = 0; j < cols; ++j) out[j] += weight * row[j];
    }
  }
}

// project_back for r known when compiling, into a zeroed Qt: each group's rows
// are read once for all r rows of Qt, with the additions in the general loop's
// order.
template <typename T, int R>
void project_back_fixed(const T* __restrict m, const T* __restrict p, T* __restrict qt, std::int64_t rows,
                        std::int64_t cols) {
  std::int64_t i = 0;
  for (; i + kGroup <= rows; i += kGroup) {
    T w[kGroup][R];
    for (std::int64_t n = 0; n < kGroup; ++n) {
      for (int k = 0; k < R; ++k) w[n][k] = p[(i + n) * R + k];
    }
    const T *m0 = m + i * cols, *m1 = m0 + cols, *m2 = m1 + cols, *m3 = m2 + cols;
    for (std::int64_t j = 0; j < cols; ++j) {
      const T a0 = m0[j], a1 = m1[j], a2 = m2[j], a3 = m3[j];
      for (int k = 0; k < R; ++k) {
        T v = qt[k * cols + j];
        v += w[0][k] * a0;
        v += w[1][k] * a1;
        v += w[2][k] * a2;
        v += w[3][k] * a3;
        qt[k * cols + j] = v;
      }
    }
  }
  project_rows_back(m, p, qt, i, rows, cols, R);
}

// Calls f.template operator()<R>() for r in 1..8, the ranks worth unrolling;
// false for others.
template <typename F>
bool with_fixed_rank(std::int64_t r, F&& f) {
  switch (r) {
    case 1: return f.template operator()<1>();
    case 2: return f.template operator()<2>();
    case 3: return f.template operator()<3>();
    case 4: return f.template operator()<4>();
    case 5: return f.template operator()<5>();
    case 6: return f.template operator()<6>();
    case 7: return f.template operator()<7>();
    case 8: return f.template operator()<8>();
    default: return false;
  }
}

}  // namespace

template <typename T>
void fold_and_project(const T* g, T* m, Approximation<T> last, const T* qt, T* p, std::int64_t rows,
                      std::int64_t cols, std::int64_t r) {
  if (with_fixed_rank(r, [&]<int R>() { return fold_last_and_project<T, R>(g, m, last, qt, p, rows, cols); })) {
    return;
  }
  std::vector<T> approximation(last.p != nullptr ? static_cast<std::size_t>(cols) : 0);
  T* a = approximation.data();
  for (std::int64_t i = 0; i < rows; ++i) {
    T* row = m + i * cols;
    const T* grad = g + i * cols;
    if (last.p != nullptr) {
      combine(last.p + i * last.r, last.qt, a, cols, last.r);
      // The error first, rounded as residual() gives it: a restore from a
      // commit of residual()'s error then goes on with the same bits.
      for (std::int64_t j = 0; j < cols; ++j) row[j] = grad[j] + (row[j] - a[j]);
    } else if (row != grad) {
      for (std::int64_t j = 0; j < cols; ++j) row[j] = grad[j] + row[j];
    }
    for (std::int64_t k = 0; k < r; ++k) p[i * r + k] = dot(row, qt + k * cols, cols);
  }
}

template <typename T>
void project_back(const T* m, const T* p, T* qt, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  for (std::int64_t k = 0; k < r * cols; ++k) qt[k] = 0;
  if (with_fixed_rank(r, [&]<int R>() {
        project_back_fixed<T, R>(m, p, qt, rows, cols);
        return true;
      })) {
    return;
  }
  // Ranks above those unrolled: rare, one row at a time.
  project_rows_back(m, p, qt, 0, rows, cols, r);
}

template <typename T>
void reconstruct(T* g, const T* p, const T* qt, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  if (with_fixed_rank(r, [&]<int R>() {
        reconstruct_fixed<T, R>(g, p, qt, rows, cols);
        return true;
      })) {
    return;
  }
  for (std::int64_t i = 0; i < rows; ++i) combine(p + i * r, qt, g + i * cols, cols, r);
}

template <typename T>
void residual(const T* m, const T* p, const T* qt, T* e, std::int64_t rows, std::int64_t cols, std::int64_t r) {
  std::vector<T> approximation(static_cast<std::size_t>(cols));
  T* a = approximation.data();
  for (std::int64_t i = 0; i < rows; ++i) {
    combine(p + i * r, qt, a, cols, r);
    for (std::int64_t j = 0; j < cols; ++j) e[i * cols + j] = m[i * cols + j] - a[j];
  }
}

template <typename T>
void orthonormalize_columns(T* p, std::int64_t rows, std::int64_t r) {
  const T tiny = std::numeric_limits<T>::min();
  for (std::int64_t k = 0; k < r; ++k) {
    T squares = 0;
    for (std::int64_t i = 0; i < rows; ++i) squares += p[i * r + k] * p[i * r + k];
    const T norm = std::sqrt(squares);
    const T scale = norm > tiny ? T(1) / norm : T(0);
    for (std::int64_t i = 0; i < rows; ++i) p[i * r + k] *= scale;
    for (std::int64_t l = k + 1; l < r; ++l) {
      T overlap = 0;
      for (std::int64_t i = 0; i < rows; ++i) overlap += p[i * r + k] * p[i * r + l];
      for (std::int64_t i = 0; i < rows; ++i) p[i * r + l] -= overlap * p[i * r + k];
    }
  }
}

#define KOLO_LOW_RANK(T)                                                                                     \
  template void fold_and_project<T>(const T*, T*, Approximation<T>, const T*, T*, std::int64_t, std::int64_t, \
                                    std::int64_t);                                                           \
  template void project_back<T>(const T*, const T*, T*, std::int64_t, std::int64_t, std::int64_t);           \
  template void reconstruct<T>(T*, const T*, const T*, std::int64_t, std::int64_t, std::int64_t);            \
  template void residual<T>(const T*, const T*, const T*, T*, std::int64_t, std::int64_t, std::int64_t);     \
  template void orthonormalize_columns<T>(T*, std::int64_t, std::int64_t);
KOLO_LOW_RANK(float)
KOLO_LOW_RANK(double)
#undef KOLO_LOW_RANK

}  // namespace kolo::torch::detail
