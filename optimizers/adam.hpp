// Adam / AdamW on the allreduced gradient (algorithms.md §2), and the element
// update that the 1-bit family (1-bit Adam, 1-bit LAMB, 0/1 Adam) reuses, so
// that their full-precision warm-up is bit-for-bit this optimizer.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optimizers/common.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/float16.hpp"
#include "sim/schema.hpp"

namespace bitlab {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool bias_correction = true;
  std::string wire = "fp32";
  static Schema<AdamOptions> schema();
};

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
// double, then rounded.
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
inline void adam_moments(float& m, float& v, float g, const AdamCoeffs& c) {
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
}

// update = m̂ ⊘ (sqrt(v̂) + ε) + wd·x, with m̂ = m / (1−β1^t), v̂ = v / (1−β2^t)
// (decoupled weight decay: AdamW, and the 1-bit family's form). With the
// corrections at 1 this is the compression stage's m ⊘ (sqrt(v*)+ε) + wd·x.
inline float adam_direction(float m, float v, float x, const AdamCoeffs& c) {
  const float m_hat = m / c.bias_correction1;
  const float v_hat = v / c.bias_correction2;
  return m_hat / (std::sqrt(v_hat) + c.eps) + c.weight_decay * x;
}

// One full Adam step of one element: moments, then x = x − lr·update.
inline void adam_step_element(float& x, float& m, float& v, float g, const AdamCoeffs& c) {
  adam_moments(m, v, g, c);
  x -= c.lr * adam_direction(m, v, x, c);
}

// One Adam step of every element (algorithms.md §2). Elements are independent,
// so the result is bit-identical for any thread count.
inline void adam_update_elements(std::span<float> x, std::span<float> m, std::span<float> v,
                                 std::span<const float> g, const AdamCoeffs& c) {
  float* xp = x.data();
  float* mp = m.data();
  float* vp = v.data();
  const float* gp = g.data();
  const int64_t d = static_cast<int64_t>(x.size());
#pragma omp parallel for schedule(static) if (d > kParallelMinElements)
  for (int64_t k = 0; k < d; ++k) adam_step_element(xp[k], mp[k], vp[k], gp[k], c);
}

// Adam (Kingma & Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015,
// Algorithm 1) with decoupled weight decay (Loshchilov & Hutter, "Decoupled
// Weight Decay Regularization", ICLR 2019), on ḡ = mean_i g_i:
//   m = β1 m + (1−β1) ḡ ;  v = β2 v + (1−β2) ḡ²
//   update = m̂ ⊘ (sqrt(v̂)+ε) + wd·x ;  x = x − lr·update
// m̂, v̂ are bias-corrected when `bias_correction` is on (PyTorch's default),
// else m, v (what DeepSpeed's 1-bit family does).
// Departures, all within float rounding of PyTorch's AdamW: PyTorch computes
// lr/(1−β1^t)·m ⊘ (sqrt(v)/sqrt(1−β2^t) + ε) and shrinks x by (1 − lr·wd)
// before the step; we evaluate the formula above literally (as DeepSpeed's
// 1-bit Adam does), in float, with ε added outside the square root as Kingma
// & Ba do.
class Adam : public Optimizer {
 public:
  explicit Adam(const AdamOptions& opts);
  void setup(Cluster& cluster) override;
  void step(StepContext& ctx) override;

  const AdamOptions& options() const { return opts_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }

 private:
  AdamOptions opts_;
  WireDtype wire_;
  std::vector<float> g_mean_;  // ḡ
  std::vector<float> m_;
  std::vector<float> v_;
};

}  // namespace bitlab
