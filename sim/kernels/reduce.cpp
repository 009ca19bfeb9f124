#include "sim/kernels/reduce.hpp"

#include <cmath>
#include <vector>

namespace bitlab {
namespace {

// Applies block_fn(begin, end) -> double to every block in parallel and sums
// the results in block order. Kept as it was, apart from blocked_sum in
// reduce.hpp (same blocks, same order): the blocks' `omp simd reduction` loops
// leave their lane split to the compiler, and compiled inside the header's
// routine they gave other last bits (grad_norm of an MLP run, found by the
// bit-identity check), so this code is not moved.
template <class BlockFn>
double parallel_blocked_sum(size_t n, BlockFn block_fn) {
  const int64_t blocks = static_cast<int64_t>((n + kSumBlock - 1) / kSumBlock);
  if (blocks <= 1) return n ? block_fn(0, n) : 0.0;
  thread_local std::vector<double> partial;
  if (partial.size() < static_cast<size_t>(blocks)) partial.resize(blocks);
  double* p = partial.data();
#pragma omp parallel for schedule(static) if (blocks >= 16)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t lo = static_cast<size_t>(b) * kSumBlock;
    const size_t hi = lo + kSumBlock < n ? lo + kSumBlock : n;
    p[b] = block_fn(lo, hi);
  }
  double s = 0.0;
  for (int64_t b = 0; b < blocks; ++b) s += p[b];
  return s;
}

}  // namespace

double sum_squares(std::span<const float> x) {
  const float* d = x.data();
  return parallel_blocked_sum(x.size(), [d](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) s += double{d[i]} * d[i];
    return s;
  });
}

double dot(std::span<const float> a, std::span<const float> b) {
  const float* x = a.data();
  const float* y = b.data();
  return parallel_blocked_sum(a.size(), [x, y](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) s += double{x[i]} * y[i];
    return s;
  });
}

double distance_squared(std::span<const float> a, std::span<const float> b) {
  const float* x = a.data();
  const float* y = b.data();
  return parallel_blocked_sum(a.size(), [x, y](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) {
      const double t = double{x[i]} - y[i];
      s += t * t;
    }
    return s;
  });
}

bool all_finite(std::span<const float> x) {
  const float* d = x.data();
  // Any NaN/inf makes the sum non-finite (0*inf = NaN), so one pass suffices.
  const double s = parallel_blocked_sum(x.size(), [d](size_t lo, size_t hi) {
    double s = 0.0;
    for (size_t i = lo; i < hi; ++i) s += double{d[i]} * 0.0;
    return s;
  });
  return std::isfinite(s);
}

}  // namespace bitlab
