#include "optimizers/adam.hpp"

namespace bitlab {

Schema<AdamOptions> AdamOptions::schema() {
  Schema<AdamOptions> s;
  s.field("lr", &AdamOptions::lr, "learning rate", {rules::greater(0.0)});
  add_adam_fields(s, {});
  add_wire_field(s);
  add_gradient_exchange_field(s);
  return s;
}

Adam::Adam(const AdamOptions& opts)
    : MeanGradientOptimizer(opts.gradient_exchange, parse_wire_dtype(opts.wire)),
      opts_(opts) {}

void Adam::setup(Cluster& cluster) {
  exchange_.setup(cluster);
  g_mean_.assign(cluster.dim(), 0.0f);
  m_.assign(cluster.dim(), 0.0f);
  v_.assign(cluster.dim(), 0.0f);
}

void Adam::finish_step(StepContext& ctx) {
  // ḡ = mean_i g_i
  const std::span<const float> g_mean = exchange_.mean(ctx, g_mean_);
  // m, v, then x = x − lr·(m̂ ⊘ (sqrt(v̂)+ε) + wd·x)
  const AdamCoeffs c = adam_coeffs(opts_.lr, opts_, ctx.step);
  adam_update_elements(ctx.cluster.params(), m_, v_, g_mean, c);
}

// One phase: the gradient allreduce of every step.
CommPlan Adam::comm_plan(const PlanShape& shape) const {
  return exchange_.plan(shape);
}

void Adam::serialize(StateArchive& io) {
  exchange_.serialize(io);
  io.field("adam.m", m_);
  io.field("adam.v", v_);
}

}  // namespace bitlab
