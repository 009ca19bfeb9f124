#include "optimizers/onebit_adam.hpp"
#include "optimizers/gradient_exchange.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "optimizers/common.hpp"
#include "sim/kernels/reduce.hpp"

namespace bitlab {

namespace {

// One schema for both option structs. The fields are named with an explicit
// value type so that a member of OneBitAdamOptions also serves the derived
// ApmSqueezeOptions (a base member pointer converts, but is not deduced).
template <class O>
Schema<O> make_onebit_adam_schema() {
  Schema<O> s;
  s.template field<double>("lr", &O::lr, "learning rate", {rules::greater(0.0)});
  add_adam_fields(
      s, {.beta2 = "updated in the warm-up only",
          .weight_decay = "DeepSpeed's 1-bit Adam form, in both phases",
          .bias_correction =
              "1-bit Adam corrects the warm-up as Adam does, and in the compression stage m by "
              "1−β1^t and the frozen v* by 1−β2^T_w (its value at the switch), so the step does "
              "not jump there (departure D24: DeepSpeed never corrects); off by default because "
              "DeepSpeed's 1-bit Adam accepts the flag and never applies it"});
  s.template field<int64_t>(
      "freeze_step", &O::freeze_step,
      "T_w: steps t = 1..freeze_step are the full-precision warm-up (1-based; the switch "
      "comes after step freeze_step). Default 100 suits bitlab's small problems; the "
      "reference's default is 100000 and its docs advise 15-25 % of training. With switch "
      "variance_stable it is the latest switch",
      {rules::at_least<int64_t>(0)});
  s.template field<std::string>(
      "switch", &O::switch_rule,
      "when the warm-up ends: fixed_step (after step freeze_step; 1-bit Adam and the "
      "DeepSpeed reference) or variance_stable (after the first step t >= min_warmup whose "
      "relative change ‖v_t − v_{t−1}‖/‖v_t‖ is below var_threshold, at the latest after "
      "freeze_step; APMSqueeze's \"variance has stabilised\", rule [verify])",
      {rules::one_of({"fixed_step", "variance_stable"})});
  s.template field<double>("var_threshold", &O::var_threshold,
                           "switch variance_stable: the relative change of v per step below "
                           "which the variance counts as stable [verify: the paper gives no "
                           "number]. Without bias correction it decays like 1/t early on",
                           {rules::greater(0.0)});
  s.template field<int64_t>("min_warmup", &O::min_warmup,
                            "switch variance_stable: the earliest step after which the warm-up "
                            "may end",
                            {rules::at_least<int64_t>(1)});
  s.template field<bool>("error_feedback", &O::error_feedback,
                         "keep the worker and server errors of the compressed allreduce "
                         "(docs/algorithms.md §1); false is the ablation: every call starts from "
                         "zero errors (plain scaled sign at both stages)");
  s.template field<int64_t>("pad_multiple", &O::pad_multiple,
                            "the compressed buffer is padded to a multiple of this: 0 = the "
                            "reference's n·lcm(n, 8); otherwise a multiple of 8·n (whole bytes "
                            "per chunk), checked when the cluster is known",
                            {rules::at_least<int64_t>(0)});
  s.template field<std::string>(
      "granularity", &O::granularity,
      std::string(kGranularityDoc) +
          ". Default group: the reference's fp16 (mixed-precision) path, here one buffer",
      {rules::one_of({"flat", "group", "tensor"})});
  s.template field<std::vector<double>>(
      "momentum_mask", &O::momentum_mask,
      "optional 0/1 vector (one value per parameter) multiplied into the synchronised "
      "momentum in the compression stage, for coordinates whose gradient is structurally "
      "zero (1 bit cannot say 0); empty = none");
  s.template field<std::string>("compression", &O::compression,
                                "the momentum allreduce of the compression stage: onebit (§1) "
                                "or none = the exact fp32 ring allreduce (a test/ablation "
                                "switch: frozen variance without compression)",
                                {rules::one_of({"onebit", "none"})});
  s.template field<std::string>("wire", &O::wire,
                                std::string(kWireDoc) + " (the warm-up's gradient allreduce)",
                                {rules::one_of({"fp32", "fp16", "bf16"})});
  add_stage_compressor_fields(s);
  s.check([](const O& o, const std::string& path) {
    make_onebit_stages(o.worker_compressor, o.server_compressor, o.error_feedback, path);
    for (size_t k = 0; k < o.momentum_mask.size(); ++k) {
      const double v = o.momentum_mask[k];
      if (v != 0.0 && v != 1.0) {
        config_fail(join_path(join_path(path, "momentum_mask"), std::to_string(k)), Json(v),
                    "must be 0 or 1");
      }
    }
  });
  refuse_gradient_exchange(s, "the error-compensated 1-bit allreduce of the momentum after freeze_step");
  return s;
}

}  // namespace

Schema<OneBitAdamOptions> OneBitAdamOptions::schema() {
  return make_onebit_adam_schema<OneBitAdamOptions>();
}

Schema<ApmSqueezeOptions> ApmSqueezeOptions::schema() {
  return make_onebit_adam_schema<ApmSqueezeOptions>();
}

OneBitAdam::OneBitAdam(const OneBitAdamOptions& opts)
    : opts_(opts),
      stages_(
          make_onebit_stages(opts.worker_compressor, opts.server_compressor, opts.error_feedback)),
      wire_(parse_wire_dtype(opts.wire)),
      variance_stable_(opts.switch_rule == "variance_stable"),
      compress_(opts.compression != "none"),
      last_var_change_(std::numeric_limits<double>::quiet_NaN()) {}

CommPlan OneBitAdam::comm_plan(const PlanShape& shape) const {
  check_pad_multiple(opts_.pad_multiple, shape.workers);
  const int64_t warmup = std::min(opts_.freeze_step, shape.steps);
  CommPlan plan;
  plan.phases.push_back({"warmup", warmup, {gradient_allreduce_record(shape, wire_)}});
  plan.phases.push_back(
      {"compressed", shape.steps - warmup,
       compress_ ? OneBitAllreduceSet::plan(
                       shape.workers, onebit_slice_sizes(opts_.granularity, shape),
                       static_cast<size_t>(opts_.pad_multiple), stages_.worker, stages_.server)
                 : std::vector<CommRecord>{gradient_allreduce_record(shape, WireDtype::kFp32)}});
  if (variance_stable_ && warmup > 0) {
    plan.notes.push_back(
        "switch variance_stable: the warm-up ends once the variance is stable, which only "
        "training can tell; priced at freeze_step = " +
        std::to_string(opts_.freeze_step) + ", its upper bound (min_warmup = " +
        std::to_string(opts_.min_warmup) + " is the lower bound), so this time is an upper bound");
  }
  return plan;
}

// What setup() allocates: ḡ, m, v (APMSqueeze: and the previous v; a momentum
// mask: the mask), each d floats; with compression "none" every resident
// worker's m_i row, with general stages one m_i row per thread; the
// compressed allreduce's buffers (OneBitAllreduce::resident_bytes_for).
uint64_t OneBitAdam::planned_state_bytes(const StateShape& s) const {
  const uint64_t d = s.dim, stride = (d + 15) / 16 * 16;
  uint64_t bytes = (12 + (variance_stable_ ? 4 : 0) + (opts_.momentum_mask.empty() ? 0 : 4)) * d;
  if (!compress_) bytes += 4 * stride * static_cast<uint64_t>(s.resident);
  if (compress_ && !stages_.is_scaled_sign()) {
    bytes += 4 * stride * static_cast<uint64_t>(std::max(1, omp_get_max_threads()));
  }
  if (compress_) {
    bytes += OneBitAllreduce::resident_bytes_for(s.workers, s.resident, d, !stages_.is_scaled_sign(),
                                                 static_cast<size_t>(opts_.pad_multiple));
  }
  return bytes;
}

void OneBitAdam::setup(Cluster& cluster) {
  workers_ = cluster.workers();
  dim_ = cluster.dim();
  stride_ = cluster.stride();

  // Checks that need the cluster: the padding multiple and the mask length.
  check_pad_multiple(opts_.pad_multiple, workers_);
  if (!opts_.momentum_mask.empty()) {
    if (opts_.momentum_mask.size() != dim_) {
      config_fail("optimizer.momentum_mask", Json(opts_.momentum_mask),
                  "must have one value per parameter: " + std::to_string(dim_) + " values, got " +
                      std::to_string(opts_.momentum_mask.size()));
    }
    mask_.resize(dim_);
    for (size_t k = 0; k < dim_; ++k) {
      const double v = opts_.momentum_mask[k];
      if (v != 0.0 && v != 1.0) {
        config_fail("optimizer.momentum_mask." + std::to_string(k), Json(v), "must be 0 or 1");
      }
      mask_[k] = static_cast<float>(v);
    }
  } else {
    mask_.clear();
  }

  g_mean_.assign(dim_, 0.0f);
  m_.assign(dim_, 0.0f);
  v_.assign(dim_, 0.0f);
  if (variance_stable_) {
    v_prev_.assign(dim_, 0.0f);
  } else {
    v_prev_.clear();
  }
  // Rows for this process's workers only (all in the simulator): worker i at
  // row i − local_.begin.
  local_ = cluster.local_workers();
  seed_ = cluster.seed();
  fused_ = compress_ && stages_.is_scaled_sign();
  m_workers_.assign(compress_ ? 0 : static_cast<size_t>(local_.size()) * stride_, 0.0f);
  scratch_.assign(
      compress_ && !fused_ ? static_cast<size_t>(std::max(1, omp_get_max_threads())) * stride_ : 0,
      0.0f);
  folding_step_ = -1;
  if (compress_) {
    onebit_ = std::make_unique<OneBitAllreduceSet>(
        workers_, onebit_slices(opts_.granularity, cluster.tensors(), dim_),
        static_cast<size_t>(opts_.pad_multiple), cluster.local_workers());
    onebit_->set_stages(stages_.worker, stages_.server);
  } else {
    onebit_.reset();
  }
  compressed_ = opts_.freeze_step == 0;
  switch_step_ = compressed_ ? 0 : -1;
  phase_ = compressed_ ? "compressed" : "warmup";
  last_var_change_ = std::numeric_limits<double>::quiet_NaN();
}

void OneBitAdam::finish_step(StepContext& ctx) {
  if (compressed_) {
    compressed_step(ctx);
  } else {
    warmup_step(ctx);
  }
}

// Paper Alg. 1, warm-up: a full-precision Adam step, bit-for-bit `adam` with
// the same options (per element adam_step_element, sim/kernels/adam_elements.hpp).
void OneBitAdam::warmup_step(StepContext& ctx) {
  phase_ = "warmup";
  if (variance_stable_) std::copy(v_.begin(), v_.end(), v_prev_.begin());
  // ḡ: g_mean_, or on a streamed cluster the cluster's own mean.
  const std::span<const float> g_mean = allreduce_gradients(ctx, g_mean_, wire_);
  const AdamCoeffs c = adam_coeffs(opts_.lr, opts_, ctx.step);
  adam_update_elements(ctx.cluster.params(), m_, v_, g_mean, c);

  bool end = ctx.step >= opts_.freeze_step;
  if (variance_stable_) {
    // ρ_t = ‖v_t − v_{t−1}‖ / ‖v_t‖ (deterministic blocked sums in double).
    const double v_norm = norm2(v_);
    last_var_change_ = v_norm > 0.0 ? std::sqrt(distance_squared(v_, v_prev_)) / v_norm
                                    : std::numeric_limits<double>::infinity();
    if (ctx.step >= opts_.min_warmup && last_var_change_ < opts_.var_threshold) end = true;
  }
  if (end) {
    // The switch: v* = v (v_ is no longer written), errors zeroed.
    compressed_ = true;
    switch_step_ = ctx.step;
    if (onebit_) onebit_->reset_errors();
    check_frozen_variance(ctx.step);
  }
}

// At the switch: coordinates whose frozen sqrt(v*) lies below eps have their
// momentum divided by about eps from now on; when their gradients grow later
// (a warm-up too short to see them), the steps explode. Said once.
void OneBitAdam::check_frozen_variance(int64_t step) {
  int64_t below = 0;
  const auto eps = static_cast<float>(opts_.eps);
  // The frozen variance the compression stage divides by (D24: corrected).
  const float bc2 = compressed_coeffs(step + 1).bias_correction2;
  for (const float v : v_) below += std::sqrt(v / bc2) < eps ? 1 : 0;
  const double share = v_.empty() ? 0.0 : static_cast<double>(below) / v_.size();
  if (share <= 0.01) return;
  char text[320];
  std::snprintf(text, sizeof text,
                "at the switch (step %lld) %.1f%% of the coordinates have sqrt(v) below eps = "
                "%g: the frozen variance divides their momentum by about eps, and their steps "
                "explode if their gradients grow later; raise eps or lengthen the warm-up",
                static_cast<long long>(step), 100.0 * share, opts_.eps);
  run_warnings_.push_back(text);
}

std::string OneBitAdam::divergence_cause() const {
  if (!compressed_) return "";
  return frozen_variance_cause(v_, opts_.eps, "step " + std::to_string(switch_step_),
                               "raise optimizer.eps or lengthen the warm-up "
                               "(optimizer.freeze_step)");
}

std::vector<std::string> OneBitAdam::warnings(int64_t steps) const {
  return warmup_warnings(opts_.freeze_step, steps,
                         variance_stable_ ? "unless the variance settles first, the run never "
                                            "compresses"
                                          : "the run never compresses (it is Adam throughout)",
                         "the variance is frozen after one Adam step");
}

AdamCoeffs OneBitAdam::compressed_coeffs(int64_t t) const {
  AdamCoeffs c = adam_coeffs(opts_.lr, opts_, t);
  // Departure D24 (docs/algorithms.md §3): with bias correction on, the
  // frozen variance is the corrected v* / (1−β2^T_w) the last warm-up step
  // divided by, and the momentum keeps Adam's 1 − β1^t, so the step does not
  // jump at the switch (DeepSpeed never corrects). Off: both are exactly 1.
  if (opts_.bias_correction) {
    c.bias_correction2 =
        switch_step_ > 0
            ? static_cast<float>(1.0 - std::pow(opts_.beta2, static_cast<double>(switch_step_)))
            : 1.0f;
  }
  return c;
}

void OneBitAdam::begin_compressed_step(int64_t t) {
  c_ = compressed_coeffs(t);
  if (onebit_) onebit_->begin(fused_, seed_, t);
  folding_step_ = t;
}

bool OneBitAdam::begin_step(int64_t t) {
  if (!compressed_) return false;
  begin_compressed_step(t);
  return true;
}

// Paper Alg. 1 line 9, worker i: m_i = β1 m + (1−β1) g_i (the last
// synchronised m), per element onebit_adam_local_momentum
// (sim/kernels/onebit_adam_elements.hpp), handed straight to the worker stage
// of the compressed allreduce (line 10). The reference stages form m_i inside
// their one-pass kernel (cpu::onebit_adam_worker_block, which calls the same
// element function), checked bit for bit against the two lines below by
// test_kernels ("run_momentum (one pass, ...) is run() on the momenta": fused,
// streamed in any worker order, and written-out rows).
void OneBitAdam::take_gradient(int i, std::span<const float> g) {
  if (fused_) {
    onebit_->add_worker_momentum(i, m_.data(), g.data(), c_);
    return;
  }
  float* m_i = compress_ ? scratch_.data() + static_cast<size_t>(omp_get_thread_num()) * stride_
                         : m_workers_.data() + static_cast<size_t>(i - local_.begin) * stride_;
  cpu::onebit_adam_momentum(m_.data(), g.data(), dim_, m_i, c_);
  if (onebit_) onebit_->add_worker(i, {m_i, dim_});
}

// Paper Alg. 1, compression stage (lines 8-12), in order; the per-element
// rules are in sim/kernels/onebit_adam_elements.hpp, named on the right:
//   line 9   every worker i: m_i = β1 m + (1−β1) g_i       take_gradient():
//                                                          onebit_adam_local_momentum
//   line 10  m = compressed_allreduce(m_1, …, m_n)         OneBitAllreduceSet::finish
//                                                          (§1; identical on all)
//   line 11  m = m ⊙ mask                                   (optional)
//   line 12  x = x − lr·( m̂ ⊘ (sqrt(v̂*)+ε) + wd·x )        onebit_adam_update_element
//                                                          (m̂ = m, v̂* = v* unless D24)
// A streamed cluster has handed every gradient to take_gradient() as it made it;
// otherwise (MPI, the Python bridge) the held rows are folded here.
void OneBitAdam::compressed_step(StepContext& ctx) {
  phase_ = "compressed";
  if (folding_step_ != ctx.step) {
    begin_compressed_step(ctx.step);
    const WorkerBuffers g = ctx.cluster.grads();
    const WorkerRange mine = ctx.comm.local_workers();  // all workers in the simulator
    // The fused kernel is parallel over each row's blocks; the others over
    // workers (the bits are the same either way).
    const bool rows_parallel =
        !fused_ && static_cast<int64_t>(mine.size()) * static_cast<int64_t>(dim_) >
                       kParallelMinElements;
#pragma omp parallel for schedule(static) if (rows_parallel)
    for (int i = mine.begin; i < mine.end; ++i) take_gradient(i, g[i]);
  }
  folding_step_ = -1;

  if (onebit_) {
    onebit_->finish(ctx.comm, m_);
  } else {
    const WorkerBuffers momenta{m_workers_.data(), stride_, dim_, workers_, local_.begin,
                                local_.size()};
    ctx.comm.allreduce_mean(momenta, m_, WireDtype::kFp32, "ring");
  }
  cpu::onebit_adam_update(ctx.cluster.params().data(), m_.data(), v_.data(),
                          mask_.empty() ? nullptr : mask_.data(), dim_, c_);
}

void OneBitAdam::serialize(StateArchive& io) {
  phase_state(io, phase_, {"warmup", "compressed"});
  io.field("onebit_adam.compressed", compressed_);
  io.field("onebit_adam.switch_step", switch_step_);
  io.field("onebit_adam.last_var_change", last_var_change_);
  io.field("onebit_adam.m", m_);
  io.field("onebit_adam.v", v_);
  io.field("onebit_adam.v_prev", v_prev_);
  io.field("onebit_adam.m_workers", m_workers_);
  if (onebit_) onebit_->serialize(io);
}

}  // namespace bitlab
