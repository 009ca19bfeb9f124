// The n-bit quantizer's stochastic codes (sim/compress/quantize.hpp documents
// the arithmetic), host only: shared by the CPU twin of the quantizer
// (cpu::quantize_groups, quantize.cpp here) and the wire encoder
// (quantize_encode, sim/compress/quantize.cpp), so both draw and round alike.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "sim/core/rng.hpp"
#include "sim/kernels/quantize_elements.hpp"

namespace bitlab {

// Stochastic codes of y[0, len) in chunks: the draws of a chunk are made in
// a loop of their own (lane 0 of rng.block(first_index + k)), which the
// compiler vectorises (-O3), then the codes; f(k, code) consumes them.
template <class F>
inline void stochastic_codes(const GroupCoder& coder, const float* y, size_t len, float m,
                             const RngStream& rng, uint64_t first_index, F&& f) {
  constexpr size_t kChunk = 256;
  uint32_t draws[kChunk];
  for (size_t c0 = 0; c0 < len; c0 += kChunk) {
    const size_t c = std::min(kChunk, len - c0);
    for (size_t k = 0; k < c; ++k) draws[k] = rng.block(first_index + c0 + k)[0];
    for (size_t k = 0; k < c; ++k) f(c0 + k, coder.stochastic(y[c0 + k], m, draws[k]));
  }
}

}  // namespace bitlab
