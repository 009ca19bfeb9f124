#include "sim/kernels/low_rank.hpp"

#include <cmath>

namespace bitlab {

void low_rank_project(const float* m, size_t rows, size_t cols, const float* q, size_t rank,
                      float* p) {
  for (size_t i = 0; i < rows; ++i) {
    const float* mi = m + i * cols;
    float* pi = p + i * rank;
    for (size_t k = 0; k < rank; ++k) pi[k] = 0.0f;
    for (size_t j = 0; j < cols; ++j) {
      const float mij = mi[j];
      const float* qj = q + j * rank;
      for (size_t k = 0; k < rank; ++k) pi[k] += mij * qj[k];
    }
  }
}

void low_rank_project_back(const float* m, size_t rows, size_t cols, const float* p, size_t rank,
                           float* q) {
  // Row by row of M, each adding its outer product into Q: the order over
  // rows is fixed, and M is read once, in memory order.
  for (size_t e = 0; e < cols * rank; ++e) q[e] = 0.0f;
  for (size_t i = 0; i < rows; ++i) {
    const float* mi = m + i * cols;
    const float* pi = p + i * rank;
    for (size_t j = 0; j < cols; ++j) {
      const float mij = mi[j];
      float* qj = q + j * rank;
      for (size_t k = 0; k < rank; ++k) qj[k] += mij * pi[k];
    }
  }
}

void low_rank_expand(const float* p, const float* q, size_t rows, size_t cols, size_t rank,
                     float* m) {
  for (size_t i = 0; i < rows; ++i) {
    const float* pi = p + i * rank;
    for (size_t j = 0; j < cols; ++j) {
      const float* qj = q + j * rank;
      float s = 0.0f;
      for (size_t k = 0; k < rank; ++k) s += pi[k] * qj[k];
      m[i * cols + j] = s;
    }
  }
}

void orthogonalize_columns(float* a, size_t rows, size_t rank, double epsilon) {
  for (size_t c = 0; c < rank; ++c) {
    // col /= ‖col‖ (+ ε)
    double ss = 0.0;
    for (size_t i = 0; i < rows; ++i) ss += static_cast<double>(a[i * rank + c]) * a[i * rank + c];
    const float norm = static_cast<float>(std::sqrt(ss));
    const float denom = epsilon > 0 ? norm + static_cast<float>(epsilon) : norm;
    for (size_t i = 0; i < rows; ++i) a[i * rank + c] /= denom;
    // rest −= (colᵀ·rest)·col: every later column against the normalized one.
    for (size_t k = c + 1; k < rank; ++k) {
      double dot = 0.0;
      for (size_t i = 0; i < rows; ++i) dot += static_cast<double>(a[i * rank + c]) * a[i * rank + k];
      const float d = static_cast<float>(dot);
      for (size_t i = 0; i < rows; ++i) a[i * rank + k] -= d * a[i * rank + c];
    }
  }
}

}  // namespace bitlab
