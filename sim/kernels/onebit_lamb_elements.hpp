// 1-bit LAMB's per-element update in its compression stage (Li, Awan, Tang,
// Rajbhandari, Zhang, Yang, He, "1-bit LAMB: Communication Efficient
// Large-Scale Large-Batch Training with LAMB's Convergence Speed", 2021,
// Algorithm 1; docs/algorithms.md §4), as optimizers/onebit_lamb.cpp's
// compressed step calls it through cpu::onebit_lamb_stage (updates.cpp). Its
// warm-up is LAMB's direction, Adam's elements (adam_elements.hpp); each
// worker's momentum is 1-bit Adam's line 9 (onebit_adam_local_momentum) times
// the per-element scaling.
#pragma once

#include <cmath>
#include <cstddef>

#include "sim/kernels/adam_elements.hpp"

namespace bitlab {

// 1-bit LAMB's compression stage for one element of tensor p (Li et al. 2022,
// Alg. 1, lines 14-19; DeepSpeed's onebit/lamb.py, OnebitLamb.step):
//   m /= k_p ; ĝ = (m − β1 m_prev)/(1−β1) ; v_fresh = β2 v_fresh + (1−β2) ĝ²
//   u_prelim = m ⊘ (sqrt(v)+ε) ; u = u_prelim + wd·x
// returns (sqrt(v)+ε)/(sqrt(v_fresh)+ε), whose maximum over the tensor is the
// scaling factor's raw value. The corrections of c are exactly 1 (exact
// divisions) unless bias correction carries across the switch (departure D24).
struct OneBitLambStageRow {
  float* m;
  const float* m_prev;
  const float* v;
  float* v_fresh;
  float* u_prelim;
  float* u;
  const float* x;
};
inline float onebit_lamb_stage_element(const OneBitLambStageRow& r, size_t k, float k_p,
                                       const AdamCoeffs& c) {
  const float mk = r.m[k] / k_p;
  r.m[k] = mk;
  const float g_hat = (mk - r.m_prev[k] * c.beta1) / c.one_minus_beta1;
  r.v_fresh[k] = adam_second_moment(r.v_fresh[k], g_hat, c);
  const float denom = std::sqrt(r.v[k] / c.bias_correction2) + c.eps;
  r.u_prelim[k] = (mk / c.bias_correction1) / denom;
  r.u[k] = r.u_prelim[k] + c.weight_decay * r.x[k];
  return denom / (std::sqrt(r.v_fresh[k] / c.bias_correction2) + c.eps);
}

}  // namespace bitlab
