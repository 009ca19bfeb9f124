#include "optimizers/zero_one_adam.hpp"
#include "optimizers/gradient_exchange.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <omp.h>
#include <sstream>
#include <stdexcept>

#include "optimizers/common.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<ZeroOneAdamOptions> ZeroOneAdamOptions::schema() {
  using O = ZeroOneAdamOptions;
  Schema<O> s;
  s.field("lr", &O::lr, "learning rate (> 0, so lrs > 0 at every sync)", {rules::greater(0.0)});
  add_adam_fields(
      s, {.beta1 = "of m_i too, on local steps",
          .beta2 = "updated on full-precision steps only",
          .weight_decay = "worker i's local steps use wd·x_i",
          .bias_correction = "accepted and never applied, as in the reference (DeepSpeed's "
                             "ZeroOneAdam accepts it, default True, and never reads it)"});
  s.field("var_freeze_step", &O::var_freeze_step,
          "last step of stage A (the paper's max T_v): the variance is frozen and local steps "
          "begin after it (the reference's default is 100000; ours is 100, for small problems)",
          {rules::at_least<int64_t>(0)});
  s.field("var_update_scaler", &O::var_update_scaler,
          "κ: the variance-update interval doubles after every κ full-precision steps",
          {rules::at_least<int64_t>(1)});
  s.field("local_step_scaler", &O::local_step_scaler,
          "the local-step interval doubles (up to local_step_clipper) every this many stage-B "
          "steps (the reference's default 32678 is a typo of 32768)",
          {rules::at_least<int64_t>(1)});
  s.field("local_step_clipper", &O::local_step_clipper,
          "H: the largest local-step interval (steps between 1-bit syncs)",
          {rules::at_least<int64_t>(1)});
  s.field("pad_multiple", &O::pad_multiple,
          "1-bit allreduce: pad the buffer to a multiple of this (a multiple of 8n; 0 = the "
          "reference's n·lcm(n, 8))",
          {rules::at_least<int64_t>(0)});
  add_granularity_field(
      s, "Default group: the reference's fp16 (mixed-precision) path, here one buffer");
  add_wire_field(s);
  add_stage_compressor_fields(s);
  s.check([](const O& o, const std::string& path) {
    make_onebit_stages(o.worker_compressor, o.server_compressor, true, path);
  });
  refuse_gradient_exchange(s, "the 1-bit allreduce of its gradients, then of its local steps' updates");
  return s;
}

const char* zero_one_phase_name(ZeroOnePhase p) {
  switch (p) {
    case ZeroOnePhase::kFull:
      return "full";
    case ZeroOnePhase::kOneBit:
      return "onebit";
    case ZeroOnePhase::kLocal:
      return "local";
    case ZeroOnePhase::kSync:
      return "sync";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// Schedule (docs/algorithms.md §5; the counters of the reference's zoadam.py)

ZeroOneSchedule::ZeroOneSchedule(const ZeroOneAdamOptions& o)
    : freeze_(o.var_freeze_step),
      var_scaler_(o.var_update_scaler),
      local_scaler_(o.local_step_scaler),
      local_clipper_(o.local_step_clipper) {}

ZeroOnePhase ZeroOneSchedule::next() {
  const int64_t t = ++t_;
  if (t <= freeze_) {
    if (t % var_interval_ != 0) return ZeroOnePhase::kOneBit;
    if (++var_counter_ == var_scaler_) {
      var_counter_ = 0;
      var_interval_ *= 2;
    }
    return ZeroOnePhase::kFull;
  }
  const bool sync = t % local_interval_ == 0;  // the interval before this step's update
  if (++local_counter_ == local_scaler_) {
    local_counter_ = 0;
    local_interval_ = std::min(local_clipper_, 2 * local_interval_);
  }
  return sync ? ZeroOnePhase::kSync : ZeroOnePhase::kLocal;
}

double zero_one_check_lrs(double lrs, int64_t step) {
  if (!(lrs > 0.0) || !std::isfinite(lrs)) {
    std::ostringstream msg;
    msg << "zero_one_adam: at the sync of step " << step
        << " the learning rates of the local steps since the last sync sum to " << lrs
        << " (lrs must be > 0): the synchronised momentum m = -u_bar/lrs is undefined (the "
           "reference divides by zero here)";
    throw std::runtime_error(msg.str());
  }
  return lrs;
}

// ---------------------------------------------------------------------------
// Optimizer

ZeroOneAdam::ZeroOneAdam(const ZeroOneAdamOptions& opts)
    : opts_(opts),
      stages_(make_onebit_stages(opts.worker_compressor, opts.server_compressor, true)),
      wire_(parse_wire_dtype(opts.wire)),
      schedule_(opts) {}

CommPlan ZeroOneAdam::comm_plan(const PlanShape& shape) const {
  check_pad_multiple(opts_.pad_multiple, shape.workers);
  int64_t count[4] = {0, 0, 0, 0};
  ZeroOneSchedule schedule(opts_);
  for (int64_t t = 0; t < shape.steps; ++t) ++count[static_cast<int>(schedule.next())];
  const auto steps = [&](ZeroOnePhase p) { return count[static_cast<int>(p)]; };
  const auto onebit = OneBitAllreduceSet::plan(
      shape.workers, onebit_slice_sizes(opts_.granularity, shape),
      static_cast<size_t>(opts_.pad_multiple), stages_.worker, stages_.server);
  CommPlan plan;
  plan.phases.push_back(
      {"full", steps(ZeroOnePhase::kFull), {gradient_allreduce_record(shape, wire_)}});
  plan.phases.push_back({"onebit", steps(ZeroOnePhase::kOneBit), onebit});
  plan.phases.push_back({"sync", steps(ZeroOnePhase::kSync), onebit});
  plan.phases.push_back({"local", steps(ZeroOnePhase::kLocal), {}});
  return plan;
}

// What setup() allocates: ḡ, m, v, the denominator and ū (d floats each);
// every resident worker's parameters (Cluster::enable_local_params), local
// momentum and accumulated update rows, or with shared rows one m row, one
// u row and a scratch row per thread; the compressed allreduce's buffers.
uint64_t ZeroOneAdam::planned_state_bytes(const StateShape& s) const {
  const uint64_t d = s.dim;
  const uint64_t rows = local_step_in_run_
                            ? 3 * static_cast<uint64_t>(s.resident)
                            : 2 + static_cast<uint64_t>(omp_get_max_threads());
  return 20 * d + 4 * d * rows +
         OneBitAllreduce::resident_bytes_for(s.workers, s.resident, d, !stages_.is_scaled_sign(),
                                             static_cast<size_t>(opts_.pad_multiple));
}

void ZeroOneAdam::set_run_steps(int64_t steps) {
  local_step_in_run_ = steps <= 0;
  ZeroOneSchedule schedule(opts_);
  for (int64_t t = 0; t < steps && !local_step_in_run_; ++t) {
    local_step_in_run_ = schedule.next() == ZeroOnePhase::kLocal;
  }
}

void ZeroOneAdam::fit_scratch() {
  const size_t need = dim_ * static_cast<size_t>(omp_get_max_threads());
  if (scratch_.size() < need) scratch_.resize(need);
}

// Every worker's x_i, m_i and u_i from the shared values (which are every
// worker's while the rows are shared: setup, or just after a sync).
void ZeroOneAdam::make_per_worker_rows() {
  cluster_->enable_local_params();
  std::vector<float> shared;  // the shared m_i (none in setup: zeros)
  shared.swap(m_local_);
  per_worker_ = true;
  m_local_.assign(stride_ * static_cast<size_t>(local_.size()), 0.0f);
  u_.assign(stride_ * static_cast<size_t>(local_.size()), 0.0f);
  if (!shared.empty()) {
    for (int i = local_.begin; i < local_.end; ++i) {
      std::copy_n(shared.begin(), dim_, row(m_local_, i));
    }
  }
  scratch_.clear();
  scratch_.shrink_to_fit();
}

void ZeroOneAdam::setup(Cluster& cluster) {
  workers_ = cluster.workers();
  local_ = cluster.local_workers();  // all workers in the simulator
  dim_ = cluster.dim();
  check_pad_multiple(opts_.pad_multiple, workers_);
  onebit_ = std::make_unique<OneBitAllreduceSet>(
      workers_, onebit_slices(opts_.granularity, cluster.tensors(), dim_),
      static_cast<size_t>(opts_.pad_multiple), cluster.local_workers());
  onebit_->set_stages(stages_.worker, stages_.server);
  stride_ = cluster.stride();
  g_.assign(dim_, 0.0f);
  m_.assign(dim_, 0.0f);
  v_.assign(dim_, 0.0f);
  denom_.assign(dim_, 0.0f);
  ubar_.assign(dim_, 0.0f);
  schedule_ = ZeroOneSchedule(opts_);
  frozen_ = false;
  lrs_ = 0.0;
  seed_ = cluster.seed();
  cluster_ = &cluster;
  // Shared rows (see the header), or per-worker ones from the start (step()
  // must not allocate): rows for this process's workers only (all in the
  // simulator), worker i at row i − local_.begin.
  per_worker_ = false;
  m_local_.clear();
  u_.clear();
  scratch_.clear();
  if (local_step_in_run_) {
    make_per_worker_rows();
  } else {
    m_local_.assign(dim_, 0.0f);
    u_.assign(dim_, 0.0f);
    fit_scratch();
  }
  folding_step_ = -1;
  if (opts_.var_freeze_step == 0) transition();  // no stage A
}

// At the end of step var_freeze_step (DeepSpeed zeroes the errors at the same
// point: the end of that step's optimizer call).
void ZeroOneAdam::transition() {
  // The errors so far compensate gradients; from now on they would
  // compensate accumulated updates u (the reference's comment), so zero them.
  onebit_->reset_errors();
  // den = sqrt(v) + ε: adam_direction's denominator with bias correction off.
  cpu::sqrt_plus_eps(denom_.data(), v_.data(), dim_, static_cast<float>(opts_.eps));
  for (int i = local_.begin; i < local_.end; ++i) std::copy(m_.begin(), m_.end(), row(m_local_, i));
  std::fill(u_.begin(), u_.end(), 0.0f);
  lrs_ = 0.0;
  frozen_ = true;
}

void ZeroOneAdam::finish_step(StepContext& ctx) {
  if (ctx.step != schedule_.step() + 1) {
    throw std::logic_error("zero_one_adam: steps must be 1, 2, 3, ... (got " +
                           std::to_string(ctx.step) + " after " + std::to_string(schedule_.step()) +
                           ")");
  }
  phase_ = schedule_.next();
  switch (phase_) {
    case ZeroOnePhase::kFull:
    case ZeroOnePhase::kOneBit:
      stage_a(ctx, phase_ == ZeroOnePhase::kFull);
      if (schedule_.transition_after_step()) transition();
      break;
    case ZeroOnePhase::kLocal:
    case ZeroOnePhase::kSync:
      stage_b(ctx, phase_ == ZeroOnePhase::kSync);
      break;
  }
}

bool ZeroOneAdam::begin_step(int64_t t) {
  ZeroOneSchedule next = schedule_;  // the phase of step t, without advancing
  if (t != next.step() + 1) return false;  // step() refuses it
  folding_phase_ = next.next();
  if (folding_phase_ == ZeroOnePhase::kFull) return false;
  // A local step in a run longer than it was told: per-worker rows now,
  // before the gradients are made (at x_i, which is still the shared x).
  if (folding_phase_ == ZeroOnePhase::kLocal && !per_worker_) make_per_worker_rows();
  if (folding_phase_ == ZeroOnePhase::kOneBit || !per_worker_) onebit_->begin(false, seed_, t);
  folding_step_ = t;
  return true;
}

// Worker i's gradient g_i of a step that folds: stage A's "onebit" sends it
// to the 1-bit allreduce's worker stage; stage B takes worker i's local step
//   m_i = β1 m_i + (1−β1) g_i ; δ = lr·(m_i ⊘ (sqrt(v)+ε) + wd·x_i)
//   x_i −= δ ; u_i −= δ
// (its gradient was made at x_i before this changes it). With shared rows
// (a sync from the shared x, m and u = 0) only u_i ⊙ (sqrt(v)+ε) is formed,
// in this thread's scratch row, and sent to the worker stage.
void ZeroOneAdam::take_gradient(int i, std::span<const float> g) {
  if (folding_phase_ == ZeroOnePhase::kOneBit) {
    onebit_->add_worker(i, g);
    return;
  }
  const ZeroOneLocalCoeffs lc{static_cast<float>(opts_.lr), static_cast<float>(opts_.beta1),
                              static_cast<float>(1.0 - opts_.beta1),
                              static_cast<float>(opts_.weight_decay)};
  if (!per_worker_) {
    const auto thread = static_cast<size_t>(omp_get_thread_num());
    if ((thread + 1) * dim_ > scratch_.size()) {
      throw std::logic_error("zero_one_adam: take_gradient() from a thread beyond omp_get_max_threads()");
    }
    float* out = scratch_.data() + thread * dim_;
    cpu::zero_one_sync_input(cluster_->params().data(), m_local_.data(), g.data(), denom_.data(),
                             dim_, lc, out);
    onebit_->add_worker(i, {out, dim_});
    return;
  }
  cpu::zero_one_local_step(cluster_->params(i).data(), row(m_local_, i), row(u_, i), g.data(),
                           denom_.data(), dim_, lc);
}

void ZeroOneAdam::fold_rows(StepContext& ctx, ZeroOnePhase phase) {
  folding_phase_ = phase;
  const WorkerBuffers g = ctx.cluster.grads();
  const WorkerRange mine = ctx.comm.local_workers();
  if (phase == ZeroOnePhase::kOneBit || !per_worker_) {
    // take_gradient() indexes the scratch by thread: this loop's team is the current
    // thread count, which may have grown since setup() (the streamed
    // cluster's team is fixed when it is built, just before setup()).
    if (!per_worker_) fit_scratch();
    onebit_->begin(false, seed_, ctx.step);
#pragma omp parallel for schedule(static)
    for (int i = mine.begin; i < mine.end; ++i) take_gradient(i, g[i]);
  } else {
    // One worker at a time, each local step parallel over its elements.
    for (int i = mine.begin; i < mine.end; ++i) take_gradient(i, g[i]);
  }
}

void ZeroOneAdam::stage_a(StepContext& ctx, bool full) {
  Cluster& cl = ctx.cluster;
  const AdamCoeffs c = make_adam_coeffs(opts_.lr, opts_.beta1, opts_.beta2, opts_.eps,
                                        opts_.weight_decay, /*bias_correction=*/false, ctx.step);
  if (full) {
    // ḡ exact; m, v; x −= lr·(m ⊘ (sqrt(v)+ε) + wd·x): Adam's step bit for bit.
    // ḡ: g_, or on a streamed cluster the cluster's own mean.
    const std::span<const float> g_mean = allreduce_gradients(ctx, g_, wire_);
    adam_update_elements(cl.params(), m_, v_, g_mean, c);
  } else {
    // ĝ = 1-bit allreduce of the gradients (their worker stage folded as the
    // cluster made them, or here); m only; the same x update.
    if (folding_step_ != ctx.step) fold_rows(ctx, ZeroOnePhase::kOneBit);
    folding_step_ = -1;
    onebit_->finish(ctx.comm, g_);
    // m = β1 m + (1−β1) ĝ ; x = x − lr·(m ⊘ (sqrt(v)+ε) + wd·x)
    cpu::momentum_then_onebit_update(cl.params().data(), m_.data(), v_.data(), g_.data(), dim_, c);
  }
  // Every worker holds the same (synchronised) parameters in stage A.
  if (!per_worker_) return;
  const std::span<const float> x = cl.params();
  for (int i = local_.begin; i < local_.end; ++i) {
    std::copy(x.begin(), x.end(), cl.params(i).begin());
  }
}

void ZeroOneAdam::stage_b(StepContext& ctx, bool sync) {
  Cluster& cl = ctx.cluster;
  const float* den = denom_.data();

  // Local step on every worker (no communication; take_gradient()), as the cluster
  // made the gradients or here from the held rows. With shared rows, the
  // sync's worker stage instead.
  if (!sync && !per_worker_) make_per_worker_rows();  // a run longer than told
  if (folding_step_ != ctx.step) fold_rows(ctx, phase_);
  folding_step_ = -1;
  lrs_ += opts_.lr;
  if (!sync) return;

  // Sync. x_i = x_sync: the shared params still hold the last synchronised
  // value (stage B writes them only here), so the un-step is implicit in the
  // final copy below (see the header: x_i − u_i is not exact in float).
  const double lrs = zero_one_check_lrs(lrs_, ctx.step);
  if (per_worker_) {
    // ū = 1-bit allreduce(u_i ⊙ (sqrt(v)+ε)), computed in place in u (zeroed after).
    for (int i = local_.begin; i < local_.end; ++i) cpu::zero_one_scale_u(row(u_, i), den, dim_);
    onebit_->run(ctx.comm,
                 WorkerBuffers{u_.data(), stride_, dim_, workers_, local_.begin, local_.size()},
                 ubar_, seed_, ctx.step);
  } else {
    onebit_->finish(ctx.comm, ubar_);  // the worker stage take_gradient() fed
  }
  // m = −ū/lrs ; x = x_sync + ū ⊘ (sqrt(v)+ε), on the shared copy, then on
  // every worker (per-worker rows); u = 0 ; lrs = 0. m0 is the first local
  // worker's m_i (worker 0's in the simulator; the one shared row): every
  // rank computes the same m = −ū/lrs into it.
  float* xs = cl.params().data();
  float* m0 = m_local_.data();
  cpu::zero_one_sync(m0, xs, ubar_.data(), den, dim_, lrs);
  if (per_worker_) {
    for (int i = local_.begin; i < local_.end; ++i) {
      std::fill_n(row(u_, i), dim_, 0.0f);
      std::copy(xs, xs + dim_, cl.params(i).data());
      if (i > local_.begin) std::copy(m0, m0 + dim_, row(m_local_, i));
    }
  }
  lrs_ = 0.0;
}

void ZeroOneSchedule::serialize(StateArchive& io) {
  io.field("zero_one.t", t_);
  io.field("zero_one.var_interval", var_interval_);
  io.field("zero_one.var_counter", var_counter_);
  io.field("zero_one.local_interval", local_interval_);
  io.field("zero_one.local_counter", local_counter_);
}

void ZeroOneAdam::serialize(StateArchive& io) {
  schedule_.serialize(io);
  auto phase = static_cast<int32_t>(phase_);
  io.field("zero_one_adam.phase", phase);
  phase_ = static_cast<ZeroOnePhase>(phase);
  io.field("zero_one_adam.frozen", frozen_);
  io.field("zero_one_adam.lrs", lrs_);
  io.field("zero_one_adam.g", g_);
  io.field("zero_one_adam.m", m_);
  io.field("zero_one_adam.v", v_);
  io.field("zero_one_adam.denom", denom_);
  // Shared rows save one m_i and one u_i: a run resumes only with the
  // experiment it was saved from (its steps included), so with the same rows.
  io.field("zero_one_adam.m_local", m_local_);
  io.field("zero_one_adam.u", u_);
  io.field("zero_one_adam.ubar", ubar_);
  onebit_->serialize(io);
}

std::string ZeroOneAdam::divergence_cause() const {
  if (!frozen_) return "";
  return frozen_variance_cause(v_, opts_.eps,
                               "step " + std::to_string(opts_.var_freeze_step) + " (stage B)",
                               "raise optimizer.eps or freeze later (optimizer.var_freeze_step)");
}

std::vector<std::string> ZeroOneAdam::warnings(int64_t steps) const {
  std::vector<std::string> out;
  const int64_t freeze = opts_.var_freeze_step;
  if (freeze >= steps) {
    out.push_back("optimizer.var_freeze_step = " + std::to_string(freeze) +
                  " is not below steps = " + std::to_string(steps) +
                  ": the variance never freezes and no local step is taken");
    return out;
  }
  if (freeze == 0) {
    out.push_back(
        "optimizer.var_freeze_step = 0: the variance is frozen before any step "
        "has estimated it");
  }
  std::string short_one = short_warmup_warning("var_freeze_step", freeze, steps);
  if (!short_one.empty()) out.push_back(std::move(short_one));
  // The local interval first reaches 2 after local_step_scaler stage-B steps
  // (ZeroOneSchedule::next), and never with a clipper below 2.
  if (opts_.local_step_clipper < 2 || freeze + opts_.local_step_scaler >= steps) {
    out.push_back(
        "no local step starts within the run: local_step_scaler = " +
        std::to_string(opts_.local_step_scaler) +
        " stage-B steps pass before the "
        "first local step, after var_freeze_step = " +
        std::to_string(freeze) +
        (opts_.local_step_clipper < 2 ? ", and local_step_clipper < 2 forbids them" : "") +
        "; every step after the freeze synchronises");
  }
  return out;
}

}  // namespace bitlab
