// Row operations of the real models in a fixed order, so that a row's result
// does not depend on where the row sits in memory or how many rows share the
// matrix: what lets several workers' samples go through one pass
// (Problem::loss_grad_workers) with each worker's bits unchanged. Eigen's
// vectorised reductions peel elements until an aligned address, so a window
// or a sample would round differently as the first of a worker's batch and as
// the fifth of a grouped pass.
#pragma once

#include <Eigen/Dense>
#include <algorithm>

namespace bitlab {

// a[0] + a[1] + … + a[n−1], left to right.
template <class S>
S sum_of(const S* a, Eigen::Index n) {
  S s = 0;
  for (Eigen::Index i = 0; i < n; ++i) s += a[i];
  return s;
}

// Σ a[i]·b[i], left to right.
template <class S>
S dot_of(const S* a, const S* b, Eigen::Index n) {
  S s = 0;
  for (Eigen::Index i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// out[j] = Σ_r m(r, j) over rows [begin, begin + count), r in order, from 0
// (a worker's bias gradient); with `times`, Σ_r m(r, j)·times(r, j) (a
// layer-norm gain's). m is row-major.
template <class Matrix, class S>
void sum_rows(const Matrix& m, Eigen::Index begin, Eigen::Index count, S* out,
              const Matrix* times = nullptr) {
  const Eigen::Index cols = m.cols();
  std::fill(out, out + cols, S(0));
  for (Eigen::Index r = begin; r < begin + count; ++r) {
    const S* row = m.row(r).data();
    if (times) {
      const S* t = times->row(r).data();
      for (Eigen::Index j = 0; j < cols; ++j) out[j] += row[j] * t[j];
    } else {
      for (Eigen::Index j = 0; j < cols; ++j) out[j] += row[j];
    }
  }
}

// m.row(r) += b for every row (one rounding per element). m is row-major.
template <class Matrix, class Row>
void add_to_rows(Matrix& m, const Row& b) {
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    auto* row = m.row(r).data();
    for (Eigen::Index j = 0; j < m.cols(); ++j) row[j] += b[j];
  }
}

}  // namespace bitlab
