// Shared by the benchmarks: medians, a STREAM-style triad, the machine's FMA
// peak, and the check every benchmark prints beside its figures.
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <utility>
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

// Correctness beside performance, as nccl-tests prints #wrong beside its
// bandwidth: every benchmark compares the result it timed with a reference
// path's and prints how many values differ. Bit for bit, no tolerance:
// bitlab's results do not depend on the thread count or the instruction set
// (docs/design.md, "Deterministic by construction"), so one differing bit
// is a bug, and a benchmark whose result is wrong times nothing worth
// quoting. main() returns exit_status(): 1 when any check found a wrong value.
struct Check {
  int64_t wrong = 0;  // values whose bits differ (a length mismatch: every value)
  int64_t total = 0;
  void compare(std::span<const float> got, std::span<const float> want) {
    total += static_cast<int64_t>(std::max(got.size(), want.size()));
    if (got.size() != want.size()) {
      wrong += static_cast<int64_t>(std::max(got.size(), want.size()));
      return;
    }
    for (size_t k = 0; k < got.size(); ++k) {
      wrong += std::memcmp(&got[k], &want[k], sizeof(float)) != 0 ? 1 : 0;
    }
  }
  void compare_bytes(std::span<const uint8_t> got, std::span<const uint8_t> want) {
    total += static_cast<int64_t>(std::max(got.size(), want.size()));
    if (got.size() != want.size()) {
      wrong += static_cast<int64_t>(std::max(got.size(), want.size()));
      return;
    }
    for (size_t k = 0; k < got.size(); ++k) wrong += got[k] != want[k] ? 1 : 0;
  }
};

inline int64_t& wrong_so_far() {
  static int64_t wrong = 0;
  return wrong;
}

// "  check WHAT: #wrong W of N (against AGAINST)".
inline void print_check(const char* what, const Check& c, const char* against) {
  std::printf("  check %s: #wrong %lld of %lld (against %s)\n", what,
              static_cast<long long>(c.wrong), static_cast<long long>(c.total), against);
  wrong_so_far() += c.wrong;
}

inline int exit_status() {
  if (wrong_so_far() == 0) return 0;
  std::printf("FAILED: %lld wrong values; the timings above measure a wrong result\n",
              static_cast<long long>(wrong_so_far()));
  return 1;
}

// Runs f() with `threads` OpenMP threads, then restores the thread count.
template <class F>
auto with_threads(int threads, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

// f() on one thread: the reference path of a threaded loop.
template <class F>
auto on_one_thread(F&& f) {
  return with_threads(1, std::forward<F>(f));
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

// Peak fp32 FLOP rate of this machine, measured: every OpenMP thread runs
// independent chains of fused multiply-adds (12 accumulators, more than the
// FMA latency × throughput product) in the widest vector ISA the CPU has,
// compiled for that ISA whatever the build flags. FLOPs counted as 2 per lane
// per FMA. This is the figure "% of peak" is quoted against; note that a build
// without -march=native (BITLAB_NATIVE=OFF, the default) compiles Eigen for
// SSE2 only and cannot reach it.
namespace peak_detail {
template <int kAcc>
__attribute__((target("avx512f"))) inline double fma_chains_avx512(long iters) {
  __m512 acc[kAcc];
  for (int a = 0; a < kAcc; ++a) acc[a] = _mm512_set1_ps(0.001f * a);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
    for (int a = 0; a < kAcc; ++a) acc[a] = _mm512_fmadd_ps(acc[a], m, c);
  }
  alignas(64) float lanes[16];
  float sum = 0.0f;
  for (int a = 0; a < kAcc; ++a) {
    _mm512_store_ps(lanes, acc[a]);
    for (float v : lanes) sum += v;
  }
  return static_cast<double>(sum);
}
template <int kAcc>
__attribute__((target("avx2,fma"))) inline double fma_chains_avx2(long iters) {
  __m256 acc[kAcc];
  for (int a = 0; a < kAcc; ++a) acc[a] = _mm256_set1_ps(0.001f * a);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
    for (int a = 0; a < kAcc; ++a) acc[a] = _mm256_fmadd_ps(acc[a], m, c);
  }
  alignas(32) float lanes[8];
  float sum = 0.0f;
  for (int a = 0; a < kAcc; ++a) {
    _mm256_store_ps(lanes, acc[a]);
    for (float v : lanes) sum += v;
  }
  return static_cast<double>(sum);
}
}  // namespace peak_detail

struct PeakFlops {
  double gflops = 0.0;  // all threads together
  const char* isa = "";
  int threads = 1;
  double checksum = 0.0;  // sum of the chains' results (meaningless; keeps the work live)
};

// Median of `repeats` timings of every thread running its chains at once.
inline PeakFlops peak_fp32_gflops(int repeats = 5) {
  constexpr int kAcc = 12;
  const long iters = 20'000'000;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  PeakFlops out;
  out.threads = omp_get_max_threads();
  if (!avx512 && !avx2) return out;  // no FMA ISA to measure: report 0
  out.isa = avx512 ? "avx512 fma" : "avx2 fma";
  const double lanes = avx512 ? 16.0 : 8.0;
  std::vector<double> rates;
  double checksum = 0.0;  // kept in the result so the chains cannot be optimised away
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const double v = avx512 ? peak_detail::fma_chains_avx512<kAcc>(iters)
                              : peak_detail::fma_chains_avx2<kAcc>(iters);
#pragma omp atomic
      checksum += v;
    }
    const double s = seconds_since(t0);
    if (r > 0) rates.push_back(2.0 * lanes * kAcc * iters * out.threads / s / 1e9);
  }
  out.gflops = median(rates);
  out.checksum = checksum;
  return out;
}

}  // namespace bitlab::bench
