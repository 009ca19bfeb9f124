// The n-bit group quantizer's element arithmetic (sim/compress/quantize.hpp documents
// it), shared as the very same code by sim/compress/quantize.cpp and the CUDA
// quantizer kernel (BITLAB_HD).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "sim/core/float16.hpp"
#include "sim/core/hd.hpp"

namespace bitlab {

// Round to nearest, ties to even, for |v| < 2^22 (and NaN stays NaN): adding
// 1.5·2^23 pushes the fraction bits out under the default rounding mode. It
// vectorises without SSE4.1 (std::nearbyint would be a libm call per element
// on baseline x86-64). Needs IEEE semantics: the build must not use
// -ffast-math (it does not). Larger |v| only occur for clipped fp16 scales
// and are clamped right after.
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23
BITLAB_HD inline float round_half_even(float v) {
  return (v + kRoundMagic) - kRoundMagic;
}

// |x| as its bit pattern (sign cleared): for non-negative floats the integer
// order is the float order, NaN above inf.
BITLAB_HD inline uint32_t abs_bits(float x) {
  return std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu;
}

// max |x| over a span, on the bit patterns: for non-negative floats the
// integer order is the float order, and the integer max reduction vectorises
// (a float max does not without -ffast-math). A NaN compares above inf, so it
// propagates into M.
inline float max_abs(const float* x, size_t n) {
  uint32_t m = 0;
  for (size_t k = 0; k < n; ++k) m = std::max(m, abs_bits(x[k]));
  return std::bit_cast<float>(m);
}

// The group scale as the receiver sees it (fp32: M itself; fp16: M rounded
// up to fp16, saturating at 65504; NaN stays NaN).
BITLAB_HD inline float wire_scale(float m, bool fp16, uint16_t* half_bits) {
  if (!fp16) return m;
  uint16_t h = float_to_half_bits(m);
  if (half_bits_to_float(h) < m) ++h;  // next fp16 above (m > 0 here)
  // Finite M above 65504 saturates; an inf or NaN M is kept (the group
  // decodes to non-finite values, so divergence stays visible).
  if (h == 0x7C00u && abs_bits(m) != 0x7F800000u) h = 0x7BFFu;  // not ±inf
  *half_bits = h;
  return half_bits_to_float(h);
}

struct GroupCoder {
  float half_range;  // 2^(b-1)
  float lo, hi;      // -2^(b-1), 2^(b-1) - 1

  BITLAB_HD explicit GroupCoder(int bits)
      : half_range(static_cast<float>(1 << (bits - 1))),
        lo(-static_cast<float>(1 << (bits - 1))),
        hi(static_cast<float>((1 << (bits - 1)) - 1)) {}

  // Clamp written so that a NaN maps to lo (deterministic, and a NaN code can
  // never reach the integer conversion); the group's NaN scale makes Q NaN.
  BITLAB_HD float clamp(float q) const {
    q = q > lo ? q : lo;
    return q < hi ? q : hi;
  }
  BITLAB_HD float nearest(float y, float m) const {
    return clamp(round_half_even(y / m * half_range));
  }
  // floor(v) + [u < v - floor(v)] with u = draw·2^-24 ∈ [0, 1): P(round up)
  // = frac(v) up to 2^-24.
  BITLAB_HD float stochastic(float y, float m, uint32_t draw) const {
    const float v = y / m * half_range;
    float f = round_half_even(v);
    f = f > v ? f - 1.0f : f;
    const float u = static_cast<float>(draw >> 8) * (1.0f / 16777216.0f);
    return clamp(f + (u < v - f ? 1.0f : 0.0f));
  }
};

// Q(y) of one element of a group with wire scale m ≠ 0 and step = m·2^(1−b):
// nearest, or stochastic with `draw` (lane 0 of rng.block(first_index + k)).
BITLAB_HD inline float quantize_element(const GroupCoder& coder, float y, float m, float step,
                                        bool stochastic, uint32_t draw) {
  return (stochastic ? coder.stochastic(y, m, draw) : coder.nearest(y, m)) * step;
}

// LoCo's moving-average error feedback (docs/algorithms.md §6), one element:
// e = β·e + (1−β)·(h − ĥ), with b = fl(β) and c = 1 − b in float.
BITLAB_HD inline float ema_error_element(float e, float h, float ch, float b, float c) {
  return b * e + c * (h - ch);
}

}  // namespace bitlab
