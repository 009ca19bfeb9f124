// fp16 (IEEE binary16) and bf16 rounding, round-to-nearest-even, written out
// so the simulator does not depend on compiler support for _Float16. Used to
// apply a low-precision wire to values ("a lower-precision wire changes the
// math as it would for real").
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>

#include "sim/core/hd.hpp"

namespace bitlab {

// BITLAB_HD: the CUDA quantizer (sim/cuda/) rounds fp16 scales with this code.
BITLAB_HD inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x0200u : 0u));
  }
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25: rounds to 0
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126 - exp;  // 14..24
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  // normal: rebias exponent 127 -> 15 and round 13 mantissa bits away
  uint32_t h = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

BITLAB_HD inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t mant = h & 0x3FFu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: value = mant * 2^-24, exact in float
      const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
      out = sign | std::bit_cast<uint32_t>(v);
    }
  } else if (exp == 31) {
    out = sign | 0x7F800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(out);
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  return static_cast<uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(uint32_t{b} << 16);
}

// round_to_half(f) == half_bits_to_float(float_to_half_bits(f)) bit for bit
// (NaN included: sign | 0x7FC00000), without branches so loops vectorise.
// Needs IEEE arithmetic with subnormals (never build with -ffast-math).
inline float round_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  const uint32_t a = x & 0x7FFFFFFFu;
  // Normal fp16 range: round the float mantissa to 10 bits (ties to even);
  // a carry into the exponent is the correct result.
  const uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & ~0x1FFFu;
  // Below 2^-14 fp16 is fixed point with quantum 2^-24: adding 0.75 (whose
  // ulp is 2^-24) rounds there; subtracting it again is exact.
  const float sub_f = (std::bit_cast<float>(a) + 0.75f) - 0.75f;
  const uint32_t sub = std::bit_cast<uint32_t>(sub_f);
  uint32_t r = a < 0x38800000u ? sub : normal;
  r = a >= 0x477FF000u ? 0x7F800000u : r;  // rounds to >= 65520: inf
  r = a > 0x7F800000u ? 0x7FC00000u : r;   // NaN
  return std::bit_cast<float>(sign | r);
}
inline float round_to_bf16(float f) {
  return bf16_bits_to_float(float_to_bf16_bits(f));
}

// Element type on the wire of an uncompressed collective.
enum class WireDtype { kFp32, kFp16, kBf16 };

inline int wire_dtype_bytes(WireDtype t) {
  return t == WireDtype::kFp32 ? 4 : 2;
}
const char* wire_dtype_name(WireDtype t);
WireDtype parse_wire_dtype(const std::string& s);  // throws std::invalid_argument

// Rounds every value to the wire type in place (no-op for fp32).
void round_to_wire(std::span<float> v, WireDtype t);

}  // namespace bitlab
