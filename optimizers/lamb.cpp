#include "optimizers/lamb.hpp"

#include <stdexcept>

#include "sim/kernels/reduce.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<LambOptions> LambOptions::schema() {
  Schema<LambOptions> s;
  s.field("lr", &LambOptions::lr, "learning rate", {rules::greater(0.0)});
  add_adam_fields(s, {.weight_decay = "part of LAMB's update u, so scaled by the trust ratio",
                      .bias_correction = "off by default because DeepSpeed's 1-bit LAMB applies "
                                         "none (the LAMB paper corrects)"});
  s.field("max_coeff", &LambOptions::max_coeff,
          "upper clamp of the per-tensor trust ratio ‖x_p‖/‖u_p‖ (1-bit LAMB reference)",
          {rules::greater(0.0)});
  s.field("min_coeff", &LambOptions::min_coeff,
          "lower clamp of the per-tensor trust ratio (1-bit LAMB reference)",
          {rules::at_least(0.0)});
  s.field("coeff_beta", &LambOptions::coeff_beta,
          "decay rate of C_p, the running average of the trust ratio that 1-bit LAMB "
          "freezes after warm-up (kept as state; does not change LAMB's steps)",
          {rules::in_closed_open(0.0, 1.0)});
  add_wire_field(s);
  add_gradient_exchange_field(s);
  s.check([](const LambOptions& o, const std::string& path) {
    if (o.min_coeff > o.max_coeff) {
      config_fail(join_path(path, "min_coeff"), Json(o.min_coeff),
                  "must be <= max_coeff (" + rules::num(o.max_coeff) + ")");
    }
  });
  return s;
}

Lamb::Lamb(const LambOptions& opts)
    : MeanGradientOptimizer(opts.gradient_exchange, parse_wire_dtype(opts.wire)),
      opts_(opts) {}

void Lamb::setup(Cluster& cluster) {
  exchange_.setup(cluster);
  const size_t d = cluster.dim();
  tensors_ = cluster.tensors();
  if (tensors_.empty()) tensors_.push_back({"all", 0, d});
  size_t next = 0;
  for (const auto& t : tensors_) {
    if (t.offset != next) {
      throw std::logic_error("lamb: the problem's tensors do not tile [0, dim): tensor \"" +
                             t.name + "\" starts at " + std::to_string(t.offset) + ", expected " +
                             std::to_string(next));
    }
    next += t.size;
  }
  if (next != d) {
    throw std::logic_error("lamb: the problem's tensors cover " + std::to_string(next) + " of " +
                           std::to_string(d) + " parameters");
  }
  g_mean_.assign(d, 0.0f);
  m_.assign(d, 0.0f);
  v_.assign(d, 0.0f);
  u_.assign(d, 0.0f);
  trust_ratio_.assign(tensors_.size(), 1.0);
  coeff_ema_.assign(tensors_.size(), 0.0);
}

void Lamb::finish_step(StepContext& ctx) {
  // ḡ = mean_i g_i
  const std::span<const float> g_mean = exchange_.mean(ctx, g_mean_);

  // m = β1 m + (1−β1) ḡ ; v = β2 v + (1−β2) ḡ² ; u = m ⊘ (sqrt(v)+ε) + wd·x
  // (the Adam element update without its step, so 1-bit LAMB can share it)
  const AdamCoeffs c = adam_coeffs(opts_.lr, opts_, ctx.step);
  const std::span<float> params = ctx.cluster.params();
  cpu::lamb_direction(m_.data(), v_.data(), g_mean.data(), params.data(), u_.data(), u_.size(), c);

  for (size_t p = 0; p < tensors_.size(); ++p) {
    const TensorInfo& t = tensors_[p];
    const std::span<float> x_p = params.subspan(t.offset, t.size);
    const std::span<const float> u_p = std::span<const float>(u_).subspan(t.offset, t.size);
    // r_p = clamp(‖x_p‖/‖u_p‖, min_coeff, max_coeff), 1 if a norm is 0
    const double r = lamb_trust_ratio(norm2(x_p), norm2(u_p), opts_.min_coeff, opts_.max_coeff);
    trust_ratio_[p] = r;
    // C_p = coeff_beta·C_p + (1−coeff_beta)·r_p, skipped when r_p == 1 (the
    // reference's `if lamb_coeff != 1.0`): a tensor with a zero norm, whose
    // ratio is the guard's 1 rather than a measurement, leaves C_p unchanged.
    if (r != 1.0) coeff_ema_[p] = opts_.coeff_beta * coeff_ema_[p] + (1.0 - opts_.coeff_beta) * r;
    // x_p = x_p − lr·r_p·u_p
    cpu::scaled_step(x_p.data(), u_p.data(), t.size, static_cast<float>(opts_.lr * r));
  }
}

// One phase: the gradient allreduce of every step.
CommPlan Lamb::comm_plan(const PlanShape& shape) const {
  return exchange_.plan(shape);
}

void Lamb::serialize(StateArchive& io) {
  exchange_.serialize(io);
  io.field("lamb.m", m_);
  io.field("lamb.v", v_);
  io.field("lamb.trust_ratio", trust_ratio_);
  io.field("lamb.coeff_ema", coeff_ema_);
}

}  // namespace bitlab
