// n-bit symmetric per-group quantization (docs/algorithms.md §1): for each group of
// `group_size` consecutive elements, M = max|y|, s = 2^b / (2M),
// q = clamp(round(s·y), −2^(b−1), 2^(b−1) − 1), Q(y) = q / s (M = 0 ⇒ Q = 0).
// Round-to-nearest (ties to even) or stochastic rounding. The scale on the
// wire is M, in fp32 or fp16 (with fp16, M is rounded to fp16 first and both
// sides use the rounded value). Used by the n-bit compressor, LoCo's
// collectives and LoCo's 8-bit error storage.
//
// Arithmetic (the same on the encode side and in quantize_dequantize, so
// decode(encode(x)) == quantize_dequantize(x) bit for bit):
//   v = (y / M)·2^(b−1)  — s·y with a single rounding (the division; the
//                          power-of-two factor is exact); |v| ≤ 2^(b−1)
//   q = clamp(rne(v) or floor(v) + [u < v − floor(v)], −2^(b−1), 2^(b−1)−1)
//   Q = q · (M·2^(1−b))  — the receiver's formula
// Stochastic rounding draws u ∈ [0, 1) (24 bits) from lane 0 of
// rng.block(first_index + k); it is unbiased up to 2^−24 of a step except in
// the top band (2^(b−1)−1)/s < y ≤ M, which is clamped down (|error| ≤ one
// step there, as with nearest rounding).
// fp16 scale: M is rounded *up* to the next fp16 value (so rounding never
// pushes an element outside the clamp range and the error bound with the
// rounded M holds), saturating at 65504 (groups with M > 65504 are clipped to
// ±65504 — a departure that only matters for values fp16 cannot hold anyway).
// A group whose M is NaN or inf decodes to non-finite values (divergence
// stays visible).
//
// Wire layout (host byte order, little-endian on every supported machine):
//   [ codes: ceil(n·b/8) bytes ][ scales: groups × (4 | 2) bytes ]
// Codes are b-bit two's complement, element 0 first, packed MSB first as one
// continuous bit stream across group boundaries; the last byte's unused low
// bits are 0. Scales are M of group 0, 1, ... as fp32 or fp16 bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "sim/core/rng.hpp"
#include "sim/kernels/quantize_spec.hpp"

namespace bitlab {

// Wire bytes for n elements: ceil(n·b/8) bytes of codes (b-bit two's
// complement, packed MSB first as one bit stream) + one scale (4 or 2 bytes)
// per group (quantize_group_count, quantize_spec.hpp).
int64_t quantize_wire_bytes(size_t n, const QuantizeSpec& spec);

// out = Q(x). Stochastic rounding of element k draws from rng.block(first_index + k)
// (lane 0), so any split of the vector gives the same result.
void quantize_dequantize(std::span<const float> x, std::span<float> out, const QuantizeSpec& spec,
                         const RngStream& rng, uint64_t first_index = 0);
// The wire image of Q(x); stochastic rounding draws as quantize_dequantize
// does (element k from rng.block(first_index + k)), so the image of a slice
// of whole groups is that slice of the whole vector's.
void quantize_encode(std::span<const float> x, std::span<uint8_t> wire, const QuantizeSpec& spec,
                     const RngStream& rng, uint64_t first_index = 0);
void quantize_decode(std::span<const uint8_t> wire, std::span<float> out, const QuantizeSpec& spec);

}  // namespace bitlab
