// 0/1 Adam's per-element updates (Lu, Li, Zhang, De Sa, He, "Maximizing
// Communication Efficiency for Large-scale Training via 0/1 Adam", ICLR 2023,
// Algorithm 1; docs/algorithms.md §5), as optimizers/zero_one_adam.cpp's steps
// call them: a local step of worker i, and the sync after the 1-bit allreduce.
// Its full-precision and 1-bit stage-A steps are Adam's elements
// (adam_elements.hpp, onebit_adam_elements.hpp). Looped by isa_kernels.inc
// and sim/cuda/kernels.cu.
#pragma once

#include "sim/core/hd.hpp"
#include "sim/kernels/adam_elements.hpp"

namespace bitlab {

// The scalars of a local step.
struct ZeroOneLocalCoeffs {
  float lr, beta1, one_minus_beta1, weight_decay;
};

// Local step of worker i's element (no communication):
//   m_i = β1 m_i + (1−β1) g_i ; δ = lr·(m_i ⊘ (sqrt(v)+ε) + wd·x_i)
//   x_i −= δ ; u_i −= δ          (den = sqrt(v) + ε, frozen)
BITLAB_HD inline void zero_one_local_element(float& x, float& m, float& u, float g, float den,
                                             const ZeroOneLocalCoeffs& c) {
  m = adam_first_moment(m, g, c);
  const float delta = c.lr * (m / den + c.weight_decay * x);
  x -= delta;
  u -= delta;
}

// Sync, after ū = 1-bit allreduce(u_i ⊙ den): m = −ū/lrs (in double, then
// rounded) and x_sync += ū ⊘ den.
BITLAB_HD inline void zero_one_sync_element(float& m0, float& x, float ubar, float den,
                                            double lrs) {
  m0 = static_cast<float>(-static_cast<double>(ubar) / lrs);
  x += ubar / den;
}

}  // namespace bitlab
