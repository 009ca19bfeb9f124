// Adam's per-element update (Kingma & Ba, "Adam: A Method for Stochastic
// Optimization", ICLR 2015, Algorithm 1, with Loshchilov & Hutter's decoupled
// weight decay; docs/algorithms.md §2), written once: optimizers/adam.cpp's
// step, the 1-bit family's full-precision warm-ups (1-bit Adam, 1-bit LAMB,
// 0/1 Adam) and their compressed stages call these, and so do the loops
// around them: sim/kernels/isa_kernels.inc (CPU, one per instruction set),
// sim/kernels/updates.cpp and sim/cuda/kernels.cu (BITLAB_HD makes them device
// functions under nvcc; elements.hpp says why the bits agree).
#pragma once

#include <cmath>
#include <cstdint>

#include "sim/core/hd.hpp"

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

// m = β1 m + (1−β1) g: Adam's first moment, the one place this line is
// written. F is float, or a vector of floats (isa_kernels.inc's fused 1-bit
// Adam worker stage: the scalars broadcast, the same operations per lane).
// C is any coefficient struct with beta1 and one_minus_beta1 (AdamCoeffs,
// ZeroOneLocalCoeffs).
template <class F, class C>
BITLAB_HD inline F adam_first_moment(F m, F g, const C& c) {
  return c.beta1 * m + c.one_minus_beta1 * g;
}

// v = β2 v + (1−β2) g²: Adam's second moment (1-bit LAMB's v_fresh too).
BITLAB_HD inline float adam_second_moment(float v, float g, const AdamCoeffs& c) {
  return c.beta2 * v + c.one_minus_beta2 * (g * g);
}

// m = β1 m + (1−β1) g ;  v = β2 v + (1−β2) g²
BITLAB_HD inline void adam_moments(float& m, float& v, float g, const AdamCoeffs& c) {
  m = adam_first_moment(m, g, c);
  v = adam_second_moment(v, g, c);
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

}  // namespace bitlab
