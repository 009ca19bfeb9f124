#include "optimizers/momentum_sgd.hpp"

#include "optimizers/common.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<MomentumSgdOptions> MomentumSgdOptions::schema() {
  Schema<MomentumSgdOptions> s;
  s.field("lr", &MomentumSgdOptions::lr, "learning rate", {rules::greater(0.0)});
  s.field("momentum", &MomentumSgdOptions::momentum, "momentum factor μ (m = μ m + g, dampening 0)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("nesterov", &MomentumSgdOptions::nesterov,
          "Nesterov momentum in PyTorch's form: step along g + μ m instead of m");
  s.field("weight_decay", &MomentumSgdOptions::weight_decay,
          "L2 weight decay wd, added to the gradient before the momentum (coupled, as "
          "torch.optim.SGD)",
          {rules::at_least(0.0)});
  add_wire_field(s);
  add_gradient_exchange_field(s);
  return s;
}

MomentumSgd::MomentumSgd(const MomentumSgdOptions& opts)
    : MeanGradientOptimizer(opts.gradient_exchange, parse_wire_dtype(opts.wire)),
      opts_(opts) {}

void MomentumSgd::setup(Cluster& cluster) {
  exchange_.setup(cluster);
  g_mean_.assign(cluster.dim(), 0.0f);
  m_.assign(cluster.dim(), 0.0f);
}

void MomentumSgd::finish_step(StepContext& ctx) {
  // ḡ = mean_i g_i
  const std::span<const float> g_mean = exchange_.mean(ctx, g_mean_);

  // d = ḡ + wd·x ; m = μ m + d ; d = nesterov ? d + μ m : m ; x = x − lr·d
  const MomentumSgdCoeffs c{static_cast<float>(opts_.lr), static_cast<float>(opts_.momentum),
                            static_cast<float>(opts_.weight_decay), opts_.nesterov};
  cpu::momentum_sgd_update(ctx.cluster.params().data(), m_.data(), g_mean.data(), g_mean.size(),
                           c);
}

// One phase: the gradient allreduce of every step.
CommPlan MomentumSgd::comm_plan(const PlanShape& shape) const {
  return exchange_.plan(shape);
}

void MomentumSgd::serialize(StateArchive& io) {
  exchange_.serialize(io);
  io.field("momentum_sgd.m", m_);
}

}  // namespace bitlab
