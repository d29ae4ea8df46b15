// The passes over a gradient matrix that PowerSGD makes each step, as plain
// loops over row-major memory: each reads the matrix once and keeps its rows in
// cache while it works on them, where library matrix products with a few
// columns would read it again for every product. Every rank runs the same
// loops in the same order, so equal inputs give equal bits.
//
// G: rows x cols, the gradient. M: the matrix compressed, G plus the error the
// last step left, kept by the caller between steps (or G itself without error
// feedback). P: rows x r. Qt: r x cols (Q transposed, so that its rows are
// contiguous). The error of a step, M - P Qt, is never stored: the next step
// folds it in from M and that step's P and Qt, which saves two passes.
#pragma once

#include <cstdint>

namespace kolo::torch::detail {

// The last step's factors of M, or none (p null): its whole M was the error.
template <typename T>
struct Approximation {
  const T* p = nullptr;
  const T* qt = nullptr;
  std::int64_t r = 0;
};

// M = G + M - last.p last.qt (M = G + M without last factors; with m == g, M
// is G as it is), then P = M Qt^T.
template <typename T>
void fold_and_project(const T* g, T* m, Approximation<T> last, const T* qt, T* p, std::int64_t rows,
                      std::int64_t cols, std::int64_t r);

// Qt = P^T M.
template <typename T>
void project_back(const T* m, const T* p, T* qt, std::int64_t rows, std::int64_t cols, std::int64_t r);

// G = P Qt.
template <typename T>
void reconstruct(T* g, const T* p, const T* qt, std::int64_t rows, std::int64_t cols, std::int64_t r);

// E = M - P Qt: the error a step left, as the next fold_and_project takes it.
template <typename T>
void residual(const T* m, const T* p, const T* qt, T* e, std::int64_t rows, std::int64_t cols, std::int64_t r);

// Makes the r columns of P (rows x r) orthonormal, Gram-Schmidt from the first.
// A column with nothing left of it (a zero gradient) stays zero.
template <typename T>
void orthonormalize_columns(T* p, std::int64_t rows, std::int64_t r);

}  // namespace kolo::torch::detail
