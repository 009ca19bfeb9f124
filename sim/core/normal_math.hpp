// The standard-normal transform of the counter-based generator, written with
// nothing but IEEE float +, −, ×, ÷, sqrt, integer operations and conversions
// — each of which is correctly rounded or exact in every instruction set —
// so that the same bits come out of the scalar code, every vectorised variant
// of fill_normal (sim/core/normal_kernels.inc: SSE2, AVX2, AVX-512) and a
// CUDA kernel built with -fmad=false. The C library's logf/sinf/cosf are not
// used: glibc picks FMA variants at run time, which may round differently.
// Files compiling this must not contract a·b + c into an FMA
// (-ffp-contract=off; see CMakeLists.txt) unless every variant does.
//
// Box–Muller (Box & Muller 1958) on a Philox block (w0, w1, w2, w3) gives
//   z0 = r0·cos(2π u1), z1 = r0·sin(2π u1), z2 = r1·cos(2π u3), z3 = r1·sin(2π u3)
//   with r = sqrt(−2 ln u0), u = ((w >> 8) + 1)·2⁻²⁴ ∈ (0, 1].
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "sim/core/hd.hpp"

namespace bitlab::normal_math {

// 24-bit integer k = (w >> 8) + 1 ∈ [1, 2²⁴] of a word; u = k·2⁻²⁴.
BITLAB_HD inline int32_t unit_code(uint32_t w) {
  return static_cast<int32_t>((w >> 8) + 1u);
}

// −2 ln(k·2⁻²⁴) for k ∈ [1, 2²⁴]. k = m·2^e with m ∈ [√½, √2); ln m = 2 atanh s with
// s = (m − 1)/(m + 1), |s| ≤ 0.1716, by its odd series to s⁹ (next term s¹¹/11 < 4e−10,
// far below float's 6e−8). e·ln 2 in two parts (ln2_hi has 8 trailing zero bits, so
// e·ln2_hi is exact for |e| ≤ 24). Accurate to about 2 ulp.
BITLAB_HD inline float minus_two_log_unit(int32_t k) {
  const float kf = static_cast<float>(k);  // exact: k ≤ 2²⁴
  const uint32_t bits = std::bit_cast<uint32_t>(kf);
  int32_t e = static_cast<int32_t>(bits >> 23) - 127;
  float m = std::bit_cast<float>((bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  const bool high = m > 1.41421356f;
  m = high ? m * 0.5f : m;  // exact
  e += high ? 1 : 0;
  const float s = (m - 1.0f) / (m + 1.0f);  // m − 1 exact (Sterbenz)
  const float s2 = s * s;
  const float poly = s2 * (0.666666667f + s2 * (0.4f + s2 * (0.285714286f + s2 * 0.222222222f)));
  const float log_m = (s + s) + s * poly;
  const float ef = static_cast<float>(e - 24);  // ln u = ln k − 24 ln 2
  constexpr float kLn2Hi = 0.693145752f;        // 0x3F317200
  constexpr float kLn2Lo = 1.42860677e-06f;     // ln 2 − kLn2Hi
  const float log_u = ef * kLn2Hi + (ef * kLn2Lo + log_m);
  return -2.0f * log_u;
}

// sin and cos of 2π·k·2⁻²⁴ for k ∈ [1, 2²⁴]. The reduction is exact in integers:
// q = round(4u) (the quadrant), r = u − q/4 ∈ [−1/8, 1/8) an exact float, a = 2π r ∈
// [−π/4, π/4]; Taylor series to a¹¹ (sin) and a¹⁰ (cos) leave < 3e−9 at |a| = π/4.
struct SinCos {
  float s, c;
};
BITLAB_HD inline SinCos sincos_two_pi_unit(int32_t k) {
  const int32_t q = (k + (1 << 21)) >> 22;  // round(k / 2²²) ∈ [0, 4]
  const int32_t r_code = k - (q << 22);     // ∈ [−2²¹, 2²¹)
  const float a = static_cast<float>(r_code) * (6.28318530717958647692f / 16777216.0f);
  const float a2 = a * a;
  // Horner from the highest term; the same order in every variant.
  const float sin_poly =
      -1.66666667e-1f + a2 * (8.33333333e-3f + a2 * (-1.98412698e-4f + a2 * 2.75573192e-6f));
  const float sin_a = a + a * (a2 * sin_poly);
  const float cos_poly =
      -0.5f +
      a2 * (4.16666667e-2f + a2 * (-1.38888889e-3f + a2 * (2.48015873e-5f + a2 * -2.75573192e-7f)));
  const float cos_a = 1.0f + a2 * cos_poly;
  // Rotation by quadrant·π/2, (sin, cos) of (quadrant·π/2 + a): odd quadrants swap
  // sin and cos; sin is negated in quadrants 2, 3 and cos in 1, 2. Sign flips as
  // bit operations (exact) and plain selects, so that every vector width if-converts.
  const uint32_t quadrant = static_cast<uint32_t>(q) & 3u;
  const bool swap = (quadrant & 1u) != 0;
  const float s0 = swap ? cos_a : sin_a;
  const float c0 = swap ? sin_a : cos_a;
  const uint32_t s_sign = (quadrant >> 1) << 31;
  const uint32_t c_sign = ((quadrant ^ (quadrant >> 1)) & 1u) << 31;
  const float s = std::bit_cast<float>(std::bit_cast<uint32_t>(s0) ^ s_sign);
  const float c = std::bit_cast<float>(std::bit_cast<uint32_t>(c0) ^ c_sign);
  return {s, c};
}

// The four normals of one Philox block (times `scale`), in lane order. The scalar
// path and every batched variant (normal_kernels.inc) call this very function.
struct Normals4 {
  float z[4];
};
BITLAB_HD inline Normals4 normals_of_block(uint32_t w0, uint32_t w1, uint32_t w2, uint32_t w3,
                                           float scale) {
  const float r0 = sqrtf(minus_two_log_unit(unit_code(w0)));
  const float r1 = sqrtf(minus_two_log_unit(unit_code(w2)));
  const SinCos t0 = sincos_two_pi_unit(unit_code(w1));
  const SinCos t1 = sincos_two_pi_unit(unit_code(w3));
  return {{scale * (r0 * t0.c), scale * (r0 * t0.s), scale * (r1 * t1.c), scale * (r1 * t1.s)}};
}

}  // namespace bitlab::normal_math
