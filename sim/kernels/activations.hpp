// GPT-2's tanh GELU and its derivative over arrays, in float, with a tanh of
// our own: the C library's tanhf is a scalar call (it was 37 % of the
// transformer's step), and Eigen's vectorised tanh differs from its scalar
// tail. One source (activation_kernels.inc) compiled for SSE2, AVX2 and
// AVX-512 (activation_{sse2,avx2,avx512}.cpp), elementwise, no FMA
// contraction: every variant gives the same bits, whatever an element's
// position (checked against each other and against double in the `matmul`
// suite).
#pragma once

#include <cstddef>

#include "sim/core/isa.hpp"

namespace bitlab {

// tanh(x) as a rational function: x·P(x²)/Q(x²) (odd degree 13 over even
// degree 6, minimax coefficients), with x clamped to [−9, 9] (beyond it tanh
// rounds to ±1 in float) and x itself for |x| < 4e−4. Max error against
// tanh in double: a few float ulps (the suite states the bound it checks).
void tanh_array(const float* x, float* out, size_t n);

// act[k] = 0.5·z·(1 + tanh(c·(z + a·z³))), c = √(2/π), a = 0.044715.
void gelu_tanh(const float* z, float* act, size_t n);
// d[k] ·= GELU'(z[k]) = 0.5·(1 + t) + 0.5·z·(1 − t²)·c·(1 + 3a·z²), t as above.
void gelu_tanh_backward(const float* z, float* d, size_t n);

// The same with a forced variant (tests; std::invalid_argument when this CPU
// lacks it).
enum class ActivationLoop { kTanh, kGelu, kGeluBackward };
void activation_isa(Isa isa, ActivationLoop loop, const float* in, float* out, size_t n);

}  // namespace bitlab
