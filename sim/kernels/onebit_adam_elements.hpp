// 1-bit Adam's per-element update in its compression stage (Tang et al.,
// "1-bit Adam: Communication Efficient Large-Scale Training with Adam's
// Convergence Speed", ICML 2021, Algorithm 1; docs/algorithms.md §3), as
// optimizers/onebit_adam.cpp's compressed_step() reads it line by line:
//   line 9   worker i: m_i = β1 m + (1−β1) g_i      onebit_adam_local_momentum
//   line 10  m = compressed_allreduce(m_1..m_n)      sim/collectives/onebit_allreduce.cpp
//   line 11  m = m ⊙ mask (optional)                 onebit_adam_update_element
//   line 12  x = x − lr·(m ⊘ (sqrt(v*)+ε) + wd·x)    onebit_adam_update_element
// The warm-up is Adam's step (adam_elements.hpp). Every loop that runs these
// (isa_kernels.inc, with the fused worker stage; updates.cpp; sim/cuda/
// kernels.cu) calls the functions below: no line is written twice.
#pragma once

#include "sim/core/hd.hpp"
#include "sim/kernels/adam_elements.hpp"

namespace bitlab {

// Line 9, worker i: m_i = β1 m + (1−β1) g_i, Adam's first moment of the local
// gradient into the last synchronised m. F: float, or a vector of floats.
template <class F>
BITLAB_HD inline F onebit_adam_local_momentum(F m, F g, const AdamCoeffs& c) {
  return adam_first_moment(m, g, c);
}

// Lines 11-12, after the compressed allreduce of the momenta: the optional 0/1
// mask (null: none), then x = x − lr·(m ⊘ (sqrt(v*)+ε) + wd·x), Adam's update
// with the variance frozen (c's corrections at 1 unless departure D24 keeps
// the warm-up's).
BITLAB_HD inline void onebit_adam_update_element(float& x, float& m, float v, const float* mask,
                                                 const AdamCoeffs& c) {
  if (mask) m *= *mask;
  x -= c.lr * adam_direction(m, v, x, c);
}

}  // namespace bitlab
