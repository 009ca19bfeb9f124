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
  return s;
}

Sgd::Sgd(const SgdOptions& opts) : opts_(opts), wire_(parse_wire_dtype(opts.wire)) {}

void Sgd::setup(Cluster& cluster) {
  g_mean_.assign(cluster.dim(), 0.0f);
}

void Sgd::finish_step(StepContext& ctx) {
  // ḡ = mean_i g_i (exact allreduce, rounded to the wire type).
  const std::span<const float> g_mean = allreduce_gradients(ctx, g_mean_, wire_);

  // x = x − lr·(ḡ + wd·x)
  const float lr = static_cast<float>(opts_.lr);
  const float wd = static_cast<float>(opts_.weight_decay);
  cpu::sgd_update(ctx.cluster.params().data(), g_mean.data(), g_mean.size(), lr, wd);
}

// One phase: the gradient allreduce of every step.
CommPlan Sgd::comm_plan(const PlanShape& shape) const {
  return full_allreduce_plan(shape, wire_);
}

void Sgd::serialize(StateArchive&) {}  // stateless between steps

}  // namespace bitlab
