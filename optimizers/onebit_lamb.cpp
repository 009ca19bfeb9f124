#include "optimizers/onebit_lamb.hpp"
#include "optimizers/gradient_exchange.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "optimizers/adam.hpp"
#include "optimizers/common.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<OneBitLambOptions> OneBitLambOptions::schema() {
  using O = OneBitLambOptions;
  Schema<O> s;
  // Members of LambOptions, named with their value type (a base's member
  // converts to O's, but is not deduced as one).
  s.field<double>("lr", &O::lr, "learning rate", {rules::greater(0.0)});
  add_adam_fields(
      s, {.beta2 = "also of v_fresh in the compression stage",
          .weight_decay = "part of the update u",
          .bias_correction =
              "1-bit LAMB corrects the warm-up as LAMB does, and in the compression stage m by "
              "1−β1^t and the frozen v and v_fresh by 1−β2^T_w (departure D24, as 1-bit Adam); "
              "off by default because DeepSpeed's OnebitLamb accepts the flag and applies it "
              "nowhere"});
  s.field<double>("max_coeff", &O::max_coeff, "upper clamp of the warm-up's per-tensor trust ratio",
                  {rules::greater(0.0)});
  s.field<double>("min_coeff", &O::min_coeff, "lower clamp of the warm-up's per-tensor trust ratio",
                  {rules::at_least(0.0)});
  s.field<double>("coeff_beta", &O::coeff_beta,
                  "decay rate of C_p, the running average of the trust ratio during warm-up that "
                  "the compression stage freezes (the reference advises 1/(1−coeff_beta) <= "
                  "freeze_step)",
                  {rules::in_closed_open(0.0, 1.0)});
  s.field("factor_max", &O::factor_max,
          "upper clamp of f_p, the compression stage's rescaling of the frozen C_p",
          {rules::greater(0.0)});
  s.field("factor_min", &O::factor_min, "lower clamp of f_p", {rules::greater(0.0)});
  s.field("factor_threshold", &O::factor_threshold,
          "largest relative change of f_p from one step to the next (f_p starts at 1)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("freeze_step", &O::freeze_step,
          "T_w: steps 1..T_w are full-precision LAMB, later steps compress the momentum to 1 "
          "bit (the reference's default is 100000; its docs advise 15-25 % of training)",
          {rules::at_least<int64_t>(1)});
  s.field(
      "pad_multiple", &O::pad_multiple,
      "the compressed buffer is padded to a multiple of this (a multiple of 8·workers); "
      "0 = the reference's workers·lcm(workers, 8)",
      {rules::at_least<int64_t>(0), Rule<int64_t>{[](const int64_t& v) { return v % 8 == 0; },
                                                  "must be a multiple of 8 (and of 8·workers)"}});
  add_granularity_field(s,
                        "Default flat: the reference (OnebitLamb fuses every momentum into one "
                        "buffer in both its paths); tensor is a bitlab ablation");
  s.field("padding", &O::padding,
          "what pads the compressed buffer: reuse (the reference: the padding lives in its "
          "persistent fused momentum buffer, so from the second compression step on it holds "
          "the previous call's output) or zeros (fresh zeros every call, as 1-bit Adam and 0/1 "
          "Adam pad)",
          {rules::one_of({"reuse", "zeros"})});
  s.field("error_feedback", &O::error_feedback,
          "keep the compressed allreduce's worker and server errors (false: plain scaled-sign "
          "compression, the ablation)");
  add_wire_field(s);  // the warm-up's gradient allreduce
  add_stage_compressor_fields(s);
  s.check([](const O& o, const std::string& path) {
    make_onebit_stages(o.worker_compressor, o.server_compressor, o.error_feedback, path);
    if (o.min_coeff > o.max_coeff) {
      config_fail(join_path(path, "min_coeff"), Json(o.min_coeff),
                  "must be <= max_coeff (" + rules::num(o.max_coeff) + ")");
    }
    if (o.factor_min > o.factor_max) {
      config_fail(join_path(path, "factor_min"), Json(o.factor_min),
                  "must be <= factor_max (" + rules::num(o.factor_max) + ")");
    }
  });
  refuse_gradient_exchange(s, "the error-compensated 1-bit allreduce of the momentum after freeze_step");
  return s;
}

OneBitLamb::OneBitLamb(const OneBitLambOptions& opts)
    : opts_(opts),
      stages_(
          make_onebit_stages(opts.worker_compressor, opts.server_compressor, opts.error_feedback)),
      warmup_(opts) {}

CommPlan OneBitLamb::comm_plan(const PlanShape& shape) const {
  check_pad_multiple(opts_.pad_multiple, shape.workers);
  const int64_t warmup = std::min(opts_.freeze_step, shape.steps);
  CommPlan plan;
  plan.phases.push_back({"warmup", warmup, warmup_.comm_plan(shape).phases.at(0).records});
  plan.phases.push_back(
      {"compressed", shape.steps - warmup,
       OneBitAllreduceSet::plan(shape.workers, onebit_slice_sizes(opts_.granularity, shape),
                                static_cast<size_t>(opts_.pad_multiple), stages_.worker,
                                stages_.server)});
  return plan;
}

// What setup() allocates: m, m_prev, v, v_fresh, u_prelim, u, k_elem (d
// floats each), the warm-up's Lamb (Lamb::planned_state_bytes), one momentum row per
// thread (fold) and the compressed allreduce's buffers; per-tensor
// scalars left out.
uint64_t OneBitLamb::planned_state_bytes(const StateShape& s) const {
  const uint64_t d = s.dim;
  const uint64_t stride = (d + 15) / 16 * 16;
  return 28 * d + warmup_.planned_state_bytes(s) +
         4 * stride * static_cast<uint64_t>(std::max(1, omp_get_max_threads())) +
         OneBitAllreduce::resident_bytes_for(s.workers, s.resident, d, !stages_.is_scaled_sign(),
                                             static_cast<size_t>(opts_.pad_multiple));
}

void OneBitLamb::setup(Cluster& cluster) {
  warmup_.setup(cluster);  // checks that the tensors tile [0, dim)
  workers_ = cluster.workers();
  dim_ = cluster.dim();
  stride_ = (dim_ + 15) / 16 * 16;
  tensors_ = cluster.tensors();
  if (tensors_.empty()) tensors_.push_back({"all", 0, dim_});

  check_pad_multiple(opts_.pad_multiple, workers_);
  onebit_ = std::make_unique<OneBitAllreduceSet>(
      workers_, onebit_slices(opts_.granularity, cluster.tensors(), dim_),
      static_cast<size_t>(opts_.pad_multiple), cluster.local_workers());
  onebit_->set_stages(stages_.worker, stages_.server);
  onebit_->set_pad_reuse(opts_.padding == "reuse");

  m_.assign(dim_, 0.0f);
  m_prev_.assign(dim_, 0.0f);
  v_.assign(dim_, 0.0f);
  v_fresh_.assign(dim_, 0.0f);
  u_prelim_.assign(dim_, 0.0f);
  u_.assign(dim_, 0.0f);
  k_elem_.assign(dim_, 1.0f);
  // Rows for this process's workers only (all in the simulator): worker i at
  // row i − local_.begin.
  local_ = cluster.local_workers();
  scratch_.assign(stride_ * static_cast<size_t>(std::max(1, omp_get_max_threads())), 0.0f);
  seed_ = cluster.seed();
  folding_step_ = -1;
  const size_t P = tensors_.size();
  coeff_frozen_.assign(P, 0.0);
  scaling_.assign(P, 0.0);
  scaling_f_.assign(P, 1.0f);
  last_factor_.assign(P, 1.0);  // the reference's state['last_factor'] = 1.0
  phase_ = "warmup";
  switched_ = false;
  have_scaling_ = false;
}

std::span<const float> OneBitLamb::m() const {
  return switched_ ? std::span<const float>(m_) : warmup_.m();
}

std::span<const float> OneBitLamb::v() const {
  return switched_ ? std::span<const float>(v_) : warmup_.v();
}

std::span<const double> OneBitLamb::coeff_ema() const {
  return switched_ ? std::span<const double>(coeff_frozen_) : warmup_.coeff_ema();
}

void OneBitLamb::finish_step(StepContext& ctx) {
  if (ctx.step <= opts_.freeze_step) {
    // Warm-up (Algorithm 1, lines 1-5): LAMB on ḡ, exactly optimizers/lamb.
    phase_ = "warmup";
    warmup_.finish_step(ctx);
    // At t == T_w: v_fresh = v (and C_p, m, v change hands).
    if (ctx.step == opts_.freeze_step) enter_compression();
  } else {
    phase_ = "compressed";
    compressed_step(ctx);
  }
}

void OneBitLamb::enter_compression() {
  // Algorithm 1, end of warm-up: freeze v and C_p, start v_fresh from v. The
  // compressed allreduce starts from zero errors.
  const auto wm = warmup_.m();
  const auto wv = warmup_.v();
  std::copy(wm.begin(), wm.end(), m_.begin());
  std::copy(wv.begin(), wv.end(), v_.begin());
  std::copy(wv.begin(), wv.end(), v_fresh_.begin());
  const auto c = warmup_.coeff_ema();
  std::copy(c.begin(), c.end(), coeff_frozen_.begin());
  onebit_->reset_errors();
  switched_ = true;
}

void OneBitLamb::compute_scaling_coeffs(int64_t step) {
  // First compression step only: k_p = mean_q rms(m_q) / rms(m_p), from the
  // momentum the warm-up left (the reference's `scaling_coeff`, computed from
  // ‖m_p‖/sqrt(numel) before this step's momentum update).
  const size_t P = tensors_.size();
  // Empty tensors (none in bitlab's problems) are left out of the mean and
  // keep k_p = 1, as the reference filters out parameters with numel 0.
  std::string zero_names;
  double rms_sum = 0.0;
  size_t counted = 0;
  for (size_t p = 0; p < P; ++p) {
    const TensorInfo& t = tensors_[p];
    if (t.size == 0) continue;
    ++counted;
    const double rms = norm2(std::span<const float>(m_).subspan(t.offset, t.size)) /
                       std::sqrt(static_cast<double>(t.size));
    scaling_[p] = rms;  // holds rms_p until the division below
    rms_sum += rms;
    if (rms == 0.0) zero_names += (zero_names.empty() ? "\"" : ", \"") + t.name + "\"";
  }
  if (!zero_names.empty()) {
    // The reference divides by zero here (k_p = inf, then NaN parameters).
    const bool several = zero_names.find(',') != std::string::npos;
    throw ConfigError(
        std::string("onebit_lamb: the momentum of ") + (several ? "tensors " : "tensor ") +
            zero_names + " is exactly zero at the first compression step (step " +
            std::to_string(step) +
            "), so its scaling coefficient k_p = mean_q rms(m_q) / rms(m_p) would divide by zero "
            "(DeepSpeed's reference does, and its parameters become NaN). Its averaged gradient "
            "was exactly zero through the whole warm-up (optimizer.freeze_step = " +
            std::to_string(opts_.freeze_step) +
            "), and a 1-bit compressor cannot carry a tensor that stays zero: remove the tensor "
            "from the problem or give it a gradient, or set freeze_step past the step where its "
            "gradient first becomes nonzero.",
        "optimizer.freeze_step");
  }
  const double united = rms_sum / static_cast<double>(counted);
  for (size_t p = 0; p < P; ++p) {
    scaling_[p] = tensors_[p].size == 0 ? 1.0 : united / scaling_[p];
    scaling_f_[p] = static_cast<float>(scaling_[p]);
    const TensorInfo& t = tensors_[p];
    std::fill(k_elem_.begin() + static_cast<std::ptrdiff_t>(t.offset),
              k_elem_.begin() + static_cast<std::ptrdiff_t>(t.offset + t.size), scaling_f_[p]);
  }
  have_scaling_ = true;
}

AdamCoeffs OneBitLamb::compressed_coeffs(int64_t t) const {
  // β and ε in float; no bias correction unless asked (the reference applies
  // none). D24: with it, m̂ = m/(1−β1^t) and the frozen v̂ = v/(1−β2^T_w).
  AdamCoeffs c = adam_coeffs(opts_.lr, opts_, t);
  if (opts_.bias_correction) {
    c.bias_correction2 =
        opts_.freeze_step > 0
            ? static_cast<float>(1.0 - std::pow(opts_.beta2, static_cast<double>(opts_.freeze_step)))
            : 1.0f;
  }
  return c;
}

void OneBitLamb::begin_compressed_step(int64_t t) {
  if (!switched_) enter_compression();
  if (!have_scaling_) compute_scaling_coeffs(t);
  c_ = compressed_coeffs(t);
  onebit_->begin(false, seed_, t);
  folding_step_ = t;
}

bool OneBitLamb::begin_step(int64_t t) {
  if (t <= opts_.freeze_step) return false;
  begin_compressed_step(t);
  return true;
}

// Worker i: m_i = (β1 m + (1−β1) g_i)·k (k = k_p of the element's tensor),
// straight into the worker stage of the compressed allreduce; per element
// onebit_adam_local_momentum (sim/kernels/onebit_adam_elements.hpp) times k.
void OneBitLamb::take_gradient(int i, std::span<const float> g) {
  float* m_i = scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * stride_;
  const float* m = m_.data();
  const float* k_elem = k_elem_.data();
  cpu::onebit_lamb_worker_momentum(m, g.data(), k_elem, m_i, dim_, c_);
  onebit_->add_worker(i, {m_i, dim_});
}

void OneBitLamb::compressed_step(StepContext& ctx) {
  // Every worker's m_i into the worker stage: folded by the cluster as it
  // made the gradients (streamed), or here from the held rows.
  if (folding_step_ != ctx.step) {
    begin_compressed_step(ctx.step);
    const WorkerBuffers g = ctx.cluster.grads();
    const WorkerRange mine = ctx.comm.local_workers();  // all workers in the simulator
#pragma omp parallel for schedule(static) if (mine.size() * dim_ > kParallelMinElements)
    for (int i = mine.begin; i < mine.end; ++i) take_gradient(i, g[i]);
  }
  folding_step_ = -1;
  const AdamCoeffs c = c_;
  // m_prev = m (m is read by take_gradient() above, written by the allreduce below).
  std::copy(m_.begin(), m_.end(), m_prev_.begin());

  // m = compressed_allreduce(all tensors' momenta as ONE flat buffer) (§1):
  // four collectives, logged by OneBitAllreduce.
  onebit_->finish(ctx.comm, std::span<float>(m_));

  const std::span<float> params = ctx.cluster.params();
  for (size_t p = 0; p < tensors_.size(); ++p) {
    const TensorInfo& t = tensors_[p];
    float* x = params.data() + t.offset;
    float* m = m_.data() + t.offset;
    const float* m_prev = m_prev_.data() + t.offset;
    const float* v = v_.data() + t.offset;
    float* vf = v_fresh_.data() + t.offset;
    float* up = u_prelim_.data() + t.offset;
    float* u = u_.data() + t.offset;
    const float kf = scaling_f_[p];
    // m_p /= k_p ; ĝ = (m − β1 m_prev)/(1−β1) ; v_fresh = β2 v_fresh + (1−β2) ĝ²
    // u_prelim = m ⊘ (sqrt(v)+ε) ; u = u_prelim + wd·x
    // f_p = max_k (sqrt(v)+ε)/(sqrt(v_fresh)+ε)   (max is exact: any order)
    // per element: onebit_lamb_stage_element (sim/kernels/onebit_lamb_elements.hpp)
    double f = cpu::onebit_lamb_stage({m, m_prev, v, vf, up, u, x}, t.size, kf, c);
    if (opts_.weight_decay > 0.0) {
      // ρ = min(1, ‖u_prelim‖/‖u‖) ; f = f·ρ + (1−ρ). ‖u‖ = 0 gives ρ = 1, as
      // Python's min(1.0, nan) does in the reference.
      const double u_norm = norm2(std::span<const float>(u, t.size));
      const double rho =
          u_norm == 0.0 ? 1.0 : std::min(1.0, norm2(std::span<const float>(up, t.size)) / u_norm);
      f = f * rho + (1.0 - rho);
    }
    // Clamp to [factor_min, factor_max], then to last·(1 ± threshold), in the
    // reference's order.
    f = std::min(f, opts_.factor_max);
    f = std::max(f, opts_.factor_min);
    const double last = last_factor_[p];
    f = std::min(f, last * (1.0 + opts_.factor_threshold));
    f = std::max(f, last * (1.0 - opts_.factor_threshold));
    last_factor_[p] = f;
    // x_p = x_p − lr·(C_p·f_p)·u_p
    cpu::scaled_step(x, u, t.size, static_cast<float>(opts_.lr * (coeff_frozen_[p] * f)));
  }
}

void OneBitLamb::serialize(StateArchive& io) {
  warmup_.serialize(io);
  phase_state(io, phase_, {"warmup", "compressed"});
  io.field("onebit_lamb.switched", switched_);
  io.field("onebit_lamb.have_scaling", have_scaling_);
  io.field("onebit_lamb.m", m_);
  io.field("onebit_lamb.m_prev", m_prev_);
  io.field("onebit_lamb.v", v_);
  io.field("onebit_lamb.v_fresh", v_fresh_);
  io.field("onebit_lamb.u_prelim", u_prelim_);
  io.field("onebit_lamb.u", u_);
  io.field("onebit_lamb.k_elem", k_elem_);
  io.field("onebit_lamb.coeff_frozen", coeff_frozen_);
  io.field("onebit_lamb.scaling", scaling_);
  io.field("onebit_lamb.scaling_f", scaling_f_);
  io.field("onebit_lamb.last_factor", last_factor_);
  onebit_->serialize(io);
}

std::vector<std::string> OneBitLamb::warnings(int64_t steps) const {
  return warmup_warnings(opts_.freeze_step, steps,
                         "the run never compresses (it is LAMB throughout)",
                         "the variance and trust ratios are frozen after one LAMB step");
}

}  // namespace bitlab
