// Adam / AdamW on the allreduced gradient (docs/algorithms.md §2), and the element
// update that the 1-bit family (1-bit Adam, 1-bit LAMB, 0/1 Adam) reuses, so
// that their full-precision warm-up is bit-for-bit this optimizer.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optimizers/adam_hyperparams.hpp"
#include "optimizers/common.hpp"
#include "optimizers/gradient_exchange.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"
#include "sim/kernels/adam_elements.hpp"  // the update rule, per element
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

struct AdamOptions : AdamHyperparams {
  // PyTorch's torch.optim.Adam defaults, bias correction included.
  AdamOptions()
      : AdamHyperparams{
            .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
            .bias_correction = true} {}
  double lr = 1e-3;
  std::string wire = "fp32";
  GradientExchangeOptions gradient_exchange;
  static Schema<AdamOptions> schema();
  // Does not compress: its own baseline (docs/results.md "A twin baseline").
  static TwinDeclaration twin(const Json& resolved) { return uncompressed_twin(resolved); }
};

// One Adam step of every element (docs/algorithms.md §2). Elements are independent,
// so the result is bit-identical for any thread count.
inline void adam_update_elements(std::span<float> x, std::span<float> m, std::span<float> v,
                                 std::span<const float> g, const AdamCoeffs& c) {
  // The CPU twin of the CUDA kernel (sim/kernels/cpu_kernels.hpp).
  cpu::adam_update(x.data(), m.data(), v.data(), g.data(), x.size(), c);
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
class Adam : public MeanGradientOptimizer {
 public:
  explicit Adam(const AdamOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // ḡ, m, v (d floats each).
  uint64_t planned_state_bytes(const StateShape& s) const override {
    return 12 * uint64_t{s.dim} + exchange_.planned_bytes(s);
  }
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;

  const AdamOptions& options() const { return opts_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }

 private:
  AdamOptions opts_;
  std::vector<float> g_mean_;  // ḡ
  std::vector<float> m_;
  std::vector<float> v_;
};

}  // namespace bitlab
