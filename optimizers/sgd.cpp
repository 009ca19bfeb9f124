#include "optimizers/sgd.hpp"

#include "optimizers/common.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<SgdOptions> SgdOptions::schema() {
  Schema<SgdOptions> s;
  s.field("lr", &SgdOptions::lr, "learning rate", {rules::greater(0.0)});
  s.field("weight_decay", &SgdOptions::weight_decay,
          "L2 weight decay wd, added to the gradient (coupled, as torch.optim.SGD)",
          {rules::at_least(0.0)});
  add_wire_field(s);
  add_gradient_exchange_field(s);
  return s;
}

Sgd::Sgd(const SgdOptions& opts)
    : MeanGradientOptimizer(opts.gradient_exchange, parse_wire_dtype(opts.wire)),
      opts_(opts) {}

void Sgd::setup(Cluster& cluster) {
  exchange_.setup(cluster);
  g_mean_.assign(cluster.dim(), 0.0f);
}

void Sgd::finish_step(StepContext& ctx) {
  // ḡ = mean_i g_i (exact allreduce, rounded to the wire type).
  const std::span<const float> g_mean = exchange_.mean(ctx, g_mean_);

  // x = x − lr·(ḡ + wd·x)
  const float lr = static_cast<float>(opts_.lr);
  const float wd = static_cast<float>(opts_.weight_decay);
  cpu::sgd_update(ctx.cluster.params().data(), g_mean.data(), g_mean.size(), lr, wd);
}

// One phase: the gradient allreduce of every step.
CommPlan Sgd::comm_plan(const PlanShape& shape) const {
  return exchange_.plan(shape);
}

void Sgd::serialize(StateArchive& io) { exchange_.serialize(io); }  // ḡ's exchange only

}  // namespace bitlab
