#include "sim/kernels/reduce.hpp"

#include <cmath>

namespace bitlab {

double sum_squares(std::span<const float> x) {
  const float* d = x.data();
  return blocked_sum(x.size(), [d](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) s += double{d[i]} * d[i];
    return s;
  }, true);
}

double dot(std::span<const float> a, std::span<const float> b) {
  const float* x = a.data();
  const float* y = b.data();
  return blocked_sum(a.size(), [x, y](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) s += double{x[i]} * y[i];
    return s;
  }, true);
}

double distance_squared(std::span<const float> a, std::span<const float> b) {
  const float* x = a.data();
  const float* y = b.data();
  return blocked_sum(a.size(), [x, y](size_t lo, size_t hi) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = lo; i < hi; ++i) {
      const double t = double{x[i]} - y[i];
      s += t * t;
    }
    return s;
  }, true);
}

bool all_finite(std::span<const float> x) {
  const float* d = x.data();
  // Any NaN/inf makes the sum non-finite (0*inf = NaN), so one pass suffices.
  const double s = blocked_sum(x.size(), [d](size_t lo, size_t hi) {
    double s = 0.0;
    for (size_t i = lo; i < hi; ++i) s += double{d[i]} * 0.0;
    return s;
  }, true);
  return std::isfinite(s);
}

}  // namespace bitlab
