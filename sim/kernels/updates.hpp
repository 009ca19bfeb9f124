// The optimizers' element-wise updates that have no CUDA twin (CPU only; the
// ones with a twin are in kernel_api.inc): one loop per update rule, over
// independent elements (any split over threads gives the same bits), each
// element's arithmetic one element function below, written as the paper
// writes the rule. The optimizers (optimizers/*.cpp) call these and hold no
// loop of their own whose bits matter (docs/design.md, "The rules").
//
// Bit-identity: the element functions are plain float expressions, compiled
// with the base flags (no FMA contraction on baseline x86-64; flagged in
// elements.hpp), so where the loop lives cannot change a rounding.
#pragma once

#include <cmath>
#include <cstddef>

#include "sim/kernels/elements.hpp"
#include "sim/kernels/onebit_lamb_elements.hpp"

namespace bitlab {

// SGD (Robbins & Monro 1951) with coupled weight decay: x = x − lr·(g + wd·x).
inline void sgd_step_element(float& x, float g, float lr, float wd) { x -= lr * (g + wd * x); }

// Heavy-ball / Nesterov momentum SGD as torch.optim.SGD writes it (dampening 0):
//   d = g + wd·x ; m = μ m + d ; d = nesterov ? d + μ m : m ; x = x − lr·d
struct MomentumSgdCoeffs {
  float lr, momentum, weight_decay;
  bool nesterov;
};
inline void momentum_sgd_element(float& x, float& m, float g, const MomentumSgdCoeffs& c) {
  float d = g + c.weight_decay * x;  // coupled weight decay
  m = c.momentum * m + d;            // m = μ m + d
  d = c.nesterov ? d + c.momentum * m : m;
  x -= c.lr * d;  // x = x − lr·d
}

// BinSGDM's worker side (docs/algorithms.md §7): m = β m + (1−β) g; the
// scale b = β b + (1−β)|g| (or, sqrt_ema, v = β v + (1−β) g² and b = sqrt(v));
// amsgrad: b̂ = max(b̂, b); z = m ⊘ (b + ε), which binarize_one then signs.
struct BinSgdmCoeffs {
  float beta, one_minus_beta, eps;
  bool sqrt_ema, amsgrad;
};
inline float binsgdm_scale_element(float& m, float& b, float* bmax, float g,
                                   const BinSgdmCoeffs& c) {
  m = c.beta * m + c.one_minus_beta * g;  // m = β m + (1−β) g
  float den;
  if (c.sqrt_ema) {
    b = c.beta * b + c.one_minus_beta * (g * g);  // v = β v + (1−β) g²
    den = std::sqrt(b);
  } else {
    b = c.beta * b + c.one_minus_beta * std::fabs(g);  // b = β b + (1−β)|g|
    den = b;
  }
  if (c.amsgrad) {
    *bmax = std::max(*bmax, den);  // b̂ = max(b̂, b)
    den = *bmax;
  }
  return m / (den + c.eps);  // z = m ⊘ (b + ε)
}

namespace cpu {

// x = x − lr·(g + wd·x) on [0, n) (SGD; BinSGDM's update with g = ū).
void sgd_update(float* x, const float* g, size_t n, float lr, float wd);
// momentum_sgd_element on [0, n) (momentum SGD; LoCo over it).
void momentum_sgd_update(float* x, float* m, const float* g, size_t n, const MomentumSgdCoeffs& c);
// LAMB's moments and direction (Adam's element update without its step):
// adam_moments, then u = adam_direction, on [0, n).
void lamb_direction(float* m, float* v, const float* g, const float* x, float* u, size_t n,
                    const AdamCoeffs& c);
// x = x − step·u on [0, n): a LAMB-family step, the trust ratio in `step`.
void scaled_step(float* x, const float* u, size_t n, float step);
// One worker's z = binsgdm_scale_element(...) on [0, n) (bmax null unless amsgrad).
void binsgdm_scale(const float* g, float* m, float* b, float* bmax, float* z, size_t n,
                   const BinSgdmCoeffs& c);
// out = onebit_adam_local_momentum(m, g) ⊙ k_elem on [0, n) (1-bit LAMB's
// worker momentum, the per-element scaling applied); serial: the caller
// folds workers in parallel.
void onebit_lamb_worker_momentum(const float* m, const float* g, const float* k_elem, float* out,
                                 size_t n, const AdamCoeffs& c);
// onebit_lamb_stage_element on [0, n); returns the maximum of its ratios
// (−inf for n = 0; a maximum is exact in any order).
float onebit_lamb_stage(const OneBitLambStageRow& row, size_t n, float k_p, const AdamCoeffs& c);
// den = sqrt(v) + ε on [0, n): 0/1 Adam's frozen denominator, the same float
// expression as adam_direction's with bias correction off (sqrt(v / 1) + ε).
void sqrt_plus_eps(float* den, const float* v, size_t n, float eps);
// m = onebit_adam_local_momentum(m, g), then onebit_adam_update_element (no
// mask) on [0, n): 0/1 Adam's stage A on a 1-bit-compressed ĝ.
void momentum_then_onebit_update(float* x, float* m, const float* v, const float* g, size_t n,
                                 const AdamCoeffs& c);

}  // namespace cpu
}  // namespace bitlab
