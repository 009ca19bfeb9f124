// Plain (minibatch) SGD on the allreduced gradient, the simplest baseline.
#pragma once

#include <string>
#include <vector>

#include "optimizers/gradient_exchange.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct SgdOptions {
  double lr = 0.01;
  double weight_decay = 0.0;
  std::string wire = "fp32";
  GradientExchangeOptions gradient_exchange;
  static Schema<SgdOptions> schema();
  // Does not compress: its own baseline (docs/results.md "A twin baseline").
  static TwinDeclaration twin(const Json& resolved) { return uncompressed_twin(resolved); }
};

// x = x − lr·(ḡ + wd·x), ḡ = mean_i g_i (Robbins & Monro 1951; PyTorch's
// torch.optim.SGD with momentum 0: weight decay is L2, added to the gradient).
// Arithmetic in float with the hyperparameters rounded to float, as PyTorch
// does for float parameters.
class Sgd : public MeanGradientOptimizer {
 public:
  explicit Sgd(const SgdOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // ḡ (d floats).
  uint64_t planned_state_bytes(const StateShape& s) const override {
    return 4 * uint64_t{s.dim} + exchange_.planned_bytes(s);
  }
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;

 private:
  SgdOptions opts_;
  std::vector<float> g_mean_;  // ḡ
};

}  // namespace bitlab
