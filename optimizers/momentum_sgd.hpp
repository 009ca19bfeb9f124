// SGD with heavy-ball or Nesterov momentum, PyTorch's formulation.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "optimizers/gradient_exchange.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct MomentumSgdOptions {
  double lr = 0.01;
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::string wire = "fp32";
  GradientExchangeOptions gradient_exchange;
  static Schema<MomentumSgdOptions> schema();
  // Does not compress: its own baseline (docs/results.md "A twin baseline").
  static TwinDeclaration twin(const Json& resolved) { return uncompressed_twin(resolved); }
};

// torch.optim.SGD with momentum μ and dampening 0 (Polyak 1964 heavy ball;
// Nesterov as in Sutskever et al., ICML 2013, in PyTorch's form):
//   d = ḡ + wd·x ;  m = μ m + d ;  d = nesterov ? d + μ m : m ;  x = x − lr·d
// Departure from the textbook heavy ball x −= lr·(μ m + g) with m in units of
// the step: PyTorch's m is a sum of gradients, so changing lr mid-run rescales
// the whole velocity. m starts at 0, which gives the same first step as
// PyTorch's m_1 = d_1. Arithmetic in float.
class MomentumSgd : public MeanGradientOptimizer {
 public:
  explicit MomentumSgd(const MomentumSgdOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // ḡ, m (d floats each).
  uint64_t planned_state_bytes(const StateShape& s) const override {
    return 8 * uint64_t{s.dim} + exchange_.planned_bytes(s);
  }
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;

  std::span<const float> momentum() const { return m_; }

 private:
  MomentumSgdOptions opts_;
  std::vector<float> g_mean_;  // ḡ
  std::vector<float> m_;       // momentum buffer
};

}  // namespace bitlab
