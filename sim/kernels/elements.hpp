// Element updates shared, as the very same code, by the simulator's loops and
// the CUDA kernels in sim/cuda/ (BITLAB_HD makes them device functions under
// nvcc). Each takes and returns plain floats; the loops around them live in
// this folder (cpu_kernels.cpp and the per-instruction-set isa_kernels.inc, CPU)
// and in sim/cuda/kernels.cu (GPU).
//
// Bit-identity with the GPU needs the same float operations in the same
// order: the CUDA build uses -fmad=false (no a·b+c contraction into an FMA;
// the host build has none either on baseline x86-64, flagged: BITLAB_NATIVE
// may let the host compiler contract) and IEEE division and square root
// (nvcc's defaults without --use_fast_math).
#pragma once

#include <cmath>
#include <cstdint>

#include "sim/core/hd.hpp"
#include "sim/core/rng.hpp"

namespace bitlab {

// The scalars of one Adam step, in float as the element loop uses them
// (PyTorch rounds its double hyperparameters to the float tensors' type the
// same way). With bias correction off both corrections are exactly 1, and
// dividing by 1.0f is exact, so "off" is bit-for-bit the uncorrected formula.
struct AdamCoeffs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float one_minus_beta1 = 0.1f;  // float(1 − β1) with 1 − β1 formed in double
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float bias_correction1 = 1.0f;  // 1 − β1^t, or 1 when off
  float bias_correction2 = 1.0f;  // 1 − β2^t, or 1 when off
};

// Coefficients for (1-based) step t; the corrections 1 − β^t are formed in
// double, then rounded. Host only.
inline AdamCoeffs make_adam_coeffs(double lr, double beta1, double beta2, double eps,
                                   double weight_decay, bool bias_correction, int64_t t) {
  AdamCoeffs c;
  c.lr = static_cast<float>(lr);
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  c.eps = static_cast<float>(eps);
  c.weight_decay = static_cast<float>(weight_decay);
  if (bias_correction) {
    c.bias_correction1 = static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(t)));
    c.bias_correction2 = static_cast<float>(1.0 - std::pow(beta2, static_cast<double>(t)));
  }
  return c;
}

// m = β1 m + (1−β1) g ;  v = β2 v + (1−β2) g²
BITLAB_HD inline void adam_moments(float& m, float& v, float g, const AdamCoeffs& c) {
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
}

// update = m̂ ⊘ (sqrt(v̂) + ε) + wd·x, with m̂ = m / (1−β1^t), v̂ = v / (1−β2^t)
// (decoupled weight decay: AdamW, and the 1-bit family's form). With the
// corrections at 1 this is the compression stage's m ⊘ (sqrt(v*)+ε) + wd·x.
BITLAB_HD inline float adam_direction(float m, float v, float x, const AdamCoeffs& c) {
  const float m_hat = m / c.bias_correction1;
  const float v_hat = v / c.bias_correction2;
  return m_hat / (std::sqrt(v_hat) + c.eps) + c.weight_decay * x;
}

// One full Adam step of one element: moments, then x = x − lr·update.
BITLAB_HD inline void adam_step_element(float& x, float& m, float& v, float g,
                                        const AdamCoeffs& c) {
  adam_moments(m, v, g, c);
  x -= c.lr * adam_direction(m, v, x, c);
}

// 1-bit Adam compression stage (Tang et al. 2021, Alg. 1), worker side:
// m_i = β1 m + (1−β1) g_i, the same expression as adam_moments()'s m.
BITLAB_HD inline float onebit_adam_local_momentum(float m, float g, const AdamCoeffs& c) {
  return c.beta1 * m + c.one_minus_beta1 * g;
}

// 1-bit Adam compression stage, after the compressed allreduce of the
// momenta: optional 0/1 mask (nullptr-free: mask 1 = none), then
// x = x − lr·(m ⊘ (sqrt(v*)+ε) + wd·x) with c's corrections at 1.
BITLAB_HD inline void onebit_adam_update_element(float& x, float& m, float v, const float* mask,
                                                 const AdamCoeffs& c) {
  if (mask) m *= *mask;
  x -= c.lr * adam_direction(m, v, x, c);
}

// 0/1 Adam (Lu et al. 2022, Alg. 1) scalars of a local step.
struct ZeroOneLocalCoeffs {
  float lr, beta1, one_minus_beta1, weight_decay;
};

// 0/1 Adam local step of worker i's element (no communication):
//   m_i = β1 m_i + (1−β1) g_i ; δ = lr·(m_i ⊘ (sqrt(v)+ε) + wd·x_i)
//   x_i −= δ ; u_i −= δ          (den = sqrt(v) + ε, frozen)
BITLAB_HD inline void zero_one_local_element(float& x, float& m, float& u, float g, float den,
                                             const ZeroOneLocalCoeffs& c) {
  m = c.beta1 * m + c.one_minus_beta1 * g;
  const float delta = c.lr * (m / den + c.weight_decay * x);
  x -= delta;
  u -= delta;
}

// 0/1 Adam sync, after ū = 1-bit allreduce(u_i ⊙ den): m = −ū/lrs (in double,
// then rounded) and x_sync += ū ⊘ den.
BITLAB_HD inline void zero_one_sync_element(float& m0, float& x, float ubar, float den,
                                            double lrs) {
  m0 = static_cast<float>(-static_cast<double>(ubar) / lrs);
  x += ubar / den;
}

// BinSGDM's randomized binarization of one element (docs/algorithms.md §7):
// +1 with probability (1 + z)/2, else −1, as a bool (true = +1), from 24 bits
// of `draw`. Clamping z to [−1, 1] needs no code: with u ∈ (0, 1], z > 1 gives
// p > 1 (always +1), z < −1 gives p < 0 (always −1), and NaN compares false
// (−1). No branches, so the loop vectorises.
BITLAB_HD inline bool binarize_one(float z, uint32_t draw) {
  return u32_to_unit_open0(draw) <= 0.5f * (1.0f + z);
}

}  // namespace bitlab
