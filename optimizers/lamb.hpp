// LAMB on the allreduced gradient: the full-precision optimizer that 1-bit
// LAMB runs during its warm-up (docs/algorithms.md §4, warm-up part).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/adam_hyperparams.hpp"
#include "optimizers/gradient_exchange.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"
#include "sim/core/tensor_layout.hpp"

namespace bitlab {

struct LambOptions : AdamHyperparams {
  // PyTorch's Adam defaults, but bias_correction off: DeepSpeed's 1-bit LAMB,
  // whose warm-up this is, applies none (the LAMB paper corrects).
  LambOptions()
      : AdamHyperparams{
            .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
            .bias_correction = false} {}
  double lr = 1e-3;
  double max_coeff = 10.0;
  double min_coeff = 0.01;
  double coeff_beta = 0.9;
  std::string wire = "fp32";
  GradientExchangeOptions gradient_exchange;
  static Schema<LambOptions> schema();
  // Does not compress: its own baseline (docs/results.md "A twin baseline").
  static TwinDeclaration twin(const Json& resolved) { return uncompressed_twin(resolved); }
};

// r_p = clamp(‖x_p‖ / ‖u_p‖, min_coeff, max_coeff), or exactly 1 when either
// norm is 0 (a zero-initialised tensor, or no update): the reference's guard.
inline double lamb_trust_ratio(double x_norm, double u_norm, double min_coeff, double max_coeff) {
  if (x_norm == 0.0 || u_norm == 0.0) return 1.0;
  double r = x_norm / u_norm;
  if (r > max_coeff) r = max_coeff;
  if (r < min_coeff) r = min_coeff;
  return r;
}

// LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT
// in 76 minutes", ICLR 2020, Algorithm 2) in the form DeepSpeed's 1-bit LAMB
// (Li et al., 2021) uses for its warm-up, on ḡ = mean_i g_i:
//   m = β1 m + (1−β1) ḡ ;  v = β2 v + (1−β2) ḡ²            (elementwise)
//   u = m ⊘ (sqrt(v)+ε) + wd·x                                (elementwise)
//   for every tensor p (the problem's tensor boundaries):
//     r_p = clamp(‖x_p‖/‖u_p‖, min_coeff, max_coeff), r_p = 1 if a norm is 0
//     C_p = coeff_beta·C_p + (1−coeff_beta)·r_p  (from 0; skipped when r_p == 1)
//     x_p = x_p − lr·r_p·u_p
// Departures from the LAMB paper, all following the 1-bit LAMB reference:
// no bias correction by default (`bias_correction` turns it on, as in the
// paper's Algorithm 2); the trust ratio is clamped to [min_coeff, max_coeff]
// instead of the paper's scaling function φ; C_p, the running average of the
// trust ratio that 1-bit LAMB freezes at the end of its warm-up, is kept as
// state (coeff_ema()) but does not affect this optimizer's steps.
// Norms are sums in double over fixed blocks (sim/kernels/reduce.hpp), so results are
// bit-identical for any thread count; r_p is formed in double and lr·r_p
// rounded to float, as PyTorch does with the Python scalar.
class Lamb : public MeanGradientOptimizer {
 public:
  explicit Lamb(const LambOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // ḡ, m, v, u (d floats each); per tensor two doubles, left out.
  uint64_t planned_state_bytes(const StateShape& s) const override {
    return 16 * uint64_t{s.dim} + exchange_.planned_bytes(s);
  }
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;

  const LambOptions& options() const { return opts_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  // r_p of the last step, one per tensor (in problem().tensors() order).
  std::span<const double> trust_ratios() const { return trust_ratio_; }
  // C_p, the EMA of the trust ratio (docs/algorithms.md §4), one per tensor.
  std::span<const double> coeff_ema() const { return coeff_ema_; }

 private:
  LambOptions opts_;
  std::vector<TensorInfo> tensors_;
  std::vector<float> g_mean_;  // ḡ
  std::vector<float> m_;
  std::vector<float> v_;
  std::vector<float> u_;  // this step's update direction
  std::vector<double> trust_ratio_;
  std::vector<double> coeff_ema_;
};

}  // namespace bitlab
