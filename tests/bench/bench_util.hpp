// Shared by the benchmarks: medians and a STREAM-style triad.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace bitlab::bench {

using Clock = std::chrono::steady_clock;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// STREAM triad a = b + s·c over arrays much larger than the caches; bytes
// counted as STREAM does (3 arrays x 4 bytes per element). Median of repeats
// after one warm-up.
inline double triad_gbps(size_t n, int repeats) {
  std::vector<float> a(n), b(n), c(n);
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0.0f;
    b[i] = 1.0f;
    c[i] = 2.0f;
  }
  std::vector<double> gbps;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
    float* __restrict ap = a.data();
    const float* __restrict bp = b.data();
    const float* __restrict cp = c.data();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) ap[i] = bp[i] + 3.0f * cp[i];
    const double s = seconds_since(t0);
    if (r > 0) gbps.push_back(3.0 * 4.0 * static_cast<double>(n) / s / 1e9);
  }
  if (a[n / 2] != 7.0f) std::fprintf(stderr, "triad: wrong result\n");
  return median(gbps);
}

}  // namespace bitlab::bench
