// exp and log in double written with nothing but IEEE +, −, ×, ÷, integer
// operations and conversions, each correctly rounded or exact on every CPU:
// the real problems' softmax and log-sum-exp use them instead of the C
// library's, which glibc picks at run time by CPU (with or without FMA:
// `__ieee754_exp_fma` on this machine) and which may then differ in a last
// bit. The same reasoning as normal_math.hpp's float log and sin/cos for the
// gradient noise. Files using these must not contract a·b + c into an FMA
// (the default x86-64 build has no FMA to contract into; -march=native builds
// may, and are not promised the default build's bits).
//
// Accuracy: within 1 (exp) and 2 (log) ulp of the C library's results on the
// `matmul` suite's grid (it prints the maxima and asserts 2 and 3).
#pragma once

#include <bit>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>

namespace bitlab::det_math {

// c[0] + x·(c[1] + x·(… + x·c[N−1])), from the last coefficient inwards.
template <size_t N>
inline double horner(double x, const double (&c)[N]) {
  double p = c[N - 1];
  for (size_t i = N - 1; i-- > 0;) p = p * x + c[i];
  return p;
}

// 2^k as a double for k in [−1022, 1023] (exact).
inline double pow2(int64_t k) {
  return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52);
}

// e^x. x = k·ln2 + r with k = round(x/ln2) (ties to even, by the 1.5·2^52
// shift) and |r| ≤ ln2/2 ≈ 0.347 (ln2 in two parts: ln2_hi has 21 trailing zero
// bits, so k·ln2_hi is exact for every |k| ≤ 1075 met here); e^r by its Taylor series to r^13
// (the next term, r^14/14!, is below 5e−18 relative); then × 2^k, in two steps
// when the result is subnormal.
inline double exp(double x) {
  if (x != x) return x;                                 // NaN
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
  if (x < -745.1332191019412) return 0.0;
  constexpr double kInvLn2 = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 0x3FE62E42FEE00000
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  constexpr double kShift = 6755399441055744.0;          // 1.5·2^52
  const double kd = (x * kInvLn2 + kShift) - kShift;
  const double r = (x - kd * kLn2Hi) - kd * kLn2Lo;
  // 1/2!, 1/3!, …, 1/13!
  constexpr double kInvFact[] = {0.5,
                                 1.0 / 6.0,
                                 1.0 / 24.0,
                                 1.0 / 120.0,
                                 1.0 / 720.0,
                                 1.0 / 5040.0,
                                 1.0 / 40320.0,
                                 1.0 / 362880.0,
                                 1.0 / 3628800.0,
                                 1.0 / 39916800.0,
                                 1.0 / 479001600.0,
                                 1.0 / 6227020800.0};
  double p = horner(r, kInvFact);
  p = p * r * r + r;  // r + r²·(½ + r/6 + …): the small part first
  const double er = 1.0 + p;
  const auto k = static_cast<int64_t>(kd);
  if (k < -1021) return er * pow2(k + 600) * pow2(-600);  // subnormal or tiny
  if (k > 1023) return er * 2.0 * pow2(k - 1);
  return er * pow2(k);
}

// ln x. x = m·2^e with m ∈ [√½, √2) (subnormals scaled by 2^54 first);
// ln m = 2·atanh s, s = (m − 1)/(m + 1), |s| ≤ 0.1716, by its odd series to
// s^19 (the next term, s^21/21, is below 5e−18); e·ln2 in the two parts above.
inline double log(double x) {
  if (x != x || x < 0.0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0.0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int64_t e = 0;
  if (x < 2.2250738585072014e-308) {  // subnormal: scale into the normal range
    x *= 18014398509481984.0;         // 2^54
    e = -54;
  }
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  e += static_cast<int64_t>(bits >> 52) - 1023;
  double m = std::bit_cast<double>((bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  if (m > 1.4142135623730951) {
    m *= 0.5;  // exact
    e += 1;
  }
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  constexpr double kInvOdd[] = {1.0 / 3.0,  1.0 / 5.0,  1.0 / 7.0,  1.0 / 9.0, 1.0 / 11.0,
                                1.0 / 13.0, 1.0 / 15.0, 1.0 / 17.0, 1.0 / 19.0};
  const double p = horner(s2, kInvOdd);
  const double atanh2 = 2.0 * s + 2.0 * s * s2 * p;  // 2s + 2s³·(1/3 + s²/5 + …)
  const auto ed = static_cast<double>(e);
  return ed * kLn2Hi + (ed * kLn2Lo + atanh2);
}

}  // namespace bitlab::det_math
