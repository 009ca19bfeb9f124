// 1-bit Adam and APMSqueeze (docs/algorithms.md §3): Adam with a full-precision
// warm-up, then frozen variance and the MOMENTUM sent through the two-stage
// error-compensated 1-bit allreduce (§1, sim/collectives/onebit_allreduce.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/adam_hyperparams.hpp"
#include "optimizers/onebit_stages.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"
#include "sim/kernels/onebit_adam_elements.hpp"  // the update rule, per element

namespace bitlab {

// Options of both names. `switch_rule` (JSON key "switch") is the only
// default that differs: "fixed_step" for onebit_adam (the 1-bit Adam paper and
// DeepSpeed's reference), "variance_stable" for apmsqueeze (the APMSqueeze
// paper switches once "the variance has stabilised"; see ApmSqueezeOptions).
struct OneBitAdamOptions : AdamHyperparams {
  // PyTorch's Adam defaults, but bias_correction off: DeepSpeed's OnebitAdam
  // accepts the flag and never applies it (departure D9).
  OneBitAdamOptions()
      : AdamHyperparams{
            .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
            .bias_correction = false} {}
  double lr = 1e-3;
  int64_t freeze_step = 100;
  std::string switch_rule = "fixed_step";  // "fixed_step" | "variance_stable"
  double var_threshold = 0.01;
  int64_t min_warmup = 10;
  bool error_feedback = true;
  int64_t pad_multiple = 0;
  std::string granularity = "group";   // "flat" | "group" | "tensor"
  std::vector<double> momentum_mask;   // empty: none; else dim values, each 0 or 1
  std::string compression = "onebit";  // "onebit" | "none"
  std::string wire = "fp32";
  Json worker_compressor = default_stage_compressor();
  Json server_compressor = default_stage_compressor();
  static Schema<OneBitAdamOptions> schema();
  // Uncompressed twin: the same optimizer (1-bit Adam or APMSqueeze) with
  // compression "none": the frozen variance with an exact momentum allreduce.
  static TwinDeclaration twin(const Json& resolved) {
    return {resolved.at("name").get<std::string>(), {{"compression", "none"}}, ""};
  }
};

// The same fields; only the default switch rule differs.
struct ApmSqueezeOptions : OneBitAdamOptions {
  ApmSqueezeOptions() { switch_rule = "variance_stable"; }
  static Schema<ApmSqueezeOptions> schema();
};

// 1-bit Adam (Tang et al., "1-bit Adam: Communication Efficient Large-Scale
// Training with Adam's Convergence Speed", ICML 2021, Algorithm 1) and
// APMSqueeze (Tang et al. 2020, "APMSqueeze: A Communication Efficient
// Adam-Preconditioned Momentum SGD Algorithm"), one implementation:
//
//   warm-up, t = 1 .. T_w (phase "warmup"): Adam on ḡ = mean_i g_i (exact
//     ring allreduce, element type `wire`), i.e. the `adam` optimizer with the
//     same options (bias correction per `bias_correction`, default off as in
//     DeepSpeed, which accepts the flag and never applies it).
//   at the switch (after step T_w): v* = v is frozen; every worker and server
//     error of the compressed allreduce is zeroed; gradients are no longer
//     allreduced.
//   compression stage, t > T_w (phase "compressed"), paper Alg. 1 lines 8-12:
//     m_i = β1 m + (1−β1) g_i          (each worker: LOCAL gradient into the
//                                       last synchronised momentum)
//     m   = compressed_allreduce(m_i)   (§1: the momentum is communicated)
//     m   = m ⊙ mask                    (optional momentum mask)
//     x   = x − lr·( m ⊘ (sqrt(v*)+ε) + wd·x )
//   The update is adam_direction() with v frozen: the Adam update's float
//   arithmetic. With bias_correction on it is m̂ ⊘ (sqrt(v̂*)+ε) + wd·x with
//   m̂ = m/(1−β1^t) and v̂* = v*/(1−β2^T_w), the corrected variance the last
//   warm-up step used, frozen (departure D24, docs/algorithms.md §3): without
//   it the step would grow at the switch by (1−β1^T_w)/sqrt(1−β2^T_w), 6.2x
//   at T_w = 20. compressed_step() (onebit_adam.cpp) calls these lines in
//   order; their per-element arithmetic is written once, in
//   sim/kernels/onebit_adam_elements.hpp (lines 9, 11, 12) and
//   sim/kernels/adam_elements.hpp (the warm-up, and the direction line 12
//   shares with Adam).
//
// What t and T_w mean here: steps are 1-based; the warm-up covers
// t = 1..T_w and step T_w+1 is the first compressed one.
//   switch "fixed_step" (onebit_adam's default): T_w = freeze_step. DeepSpeed
//     switches after the step whose counter (incremented before use, so also
//     1-based) reaches `step >= freeze_step`: the same T_w. But DeepSpeed's
//     first call to step() is an "initialization call" (OnebitAdam.step with
//     initialize False): it allocates the error buffers, advances the counter
//     and compresses the zero momentum, changing neither m, v nor the
//     parameters; that is an artefact of its engine and is not copied, so here
//     all T_w warm-up steps move the parameters (DeepSpeed moves them in
//     T_w − 1; docs/algorithms.md §3, departure D8).
//   switch "variance_stable" (apmsqueeze's default) [verify]: the APMSqueeze
//     paper only says the switch comes when the variance "has stabilised". We
//     measure, after each warm-up step, the relative change
//     ρ_t = ‖v_t − v_{t−1}‖₂ / ‖v_t‖₂ (ρ_t = +inf when ‖v_t‖ = 0) and take
//     T_w = the first t >= min_warmup with ρ_t < var_threshold, capped at
//     freeze_step (so it never switches later than fixed_step would).
//     Note: without bias correction v_t ≈ (1−β2^t)·E[g²], so early on
//     ρ_t ≈ 1/t whatever the gradients do: the threshold acts at first like a
//     step count of about 1/var_threshold (β2 = 0.999).
//   freeze_step = 0: no warm-up; v* = 0 and the update is m/ε (allowed, as in
//     the reference, but useless).
//
// Options beyond the paper: `error_feedback` false is the ablation (every
// compressed allreduce starts from zero errors: plain scaled sign at both
// stages); `compression` "none" replaces the compressed allreduce by the exact
// fp32 ring allreduce of the momenta (a test/ablation switch: it isolates the
// frozen-variance effect from the compression's). The parameters are the
// cluster's shared ones: every worker holds the same x in this algorithm (the
// synchronised m is identical on all).
//
// Granularity (docs/algorithms.md §1, "Granularity"): DeepSpeed calls
// compressed_allreduce once per parameter it sees: in its fp16 path
// (FP16_Optimizer) one flat master tensor per parameter group, in its fp32
// path one per model tensor, each with its own padding (to n·lcm(n, 8)),
// worker/server errors, scales and four collectives. `granularity` selects
// it: "group" (the default, the fp16 path), "tensor" (the fp32 path: one
// OneBitAllreduce per tensor of the problem, run in tensor order) or "flat"
// (one buffer for the whole model). bitlab's problems have no parameter
// groups: the whole model is one group, so "group" is "flat" bit for bit.
// The padding is fresh zeros on every call, as in the reference.
//
// Departures (docs/algorithms.md §3): D8 no initialization call (above);
// D9 bias_correction default off; D24 when on, the compression stage keeps
// the warm-up's corrections (above); D10 freeze_step
// default 100; D11 no `non_freeze` groups and no error reset on checkpoint
// load (bitlab's checkpoints keep the errors); D3 n = 1 (below).
//
// One worker (n = 1): DeepSpeed skips the compressed allreduce
// (`if self.size > 1`), so its momentum is the local one, uncompressed. We
// compress for any n (the paper's algorithm: both stages, D padded to 8);
// `compression: "none"` gives the reference's n = 1 behaviour exactly (the
// fp32 "allreduce" of one worker is the identity).
//
// Compressor per stage (docs/algorithms.md §1, "Compressor per stage"):
// `worker_compressor` and `server_compressor` choose the compressor of each
// stage of the compressed allreduce ({"name": ..., options..., with an optional
// "error_feedback"}); the default {"name": "sign"} at both is the paper's
// collective bit for bit, anything else compresses each chunk on its own and
// logs two collectives of the compressors' exact image sizes. binarize is
// refused (exit 2). Under MPI the stages' own wire images travel.
//
// Memory (docs/building.md, "Many workers"): the warm-up reads the gradients
// through their mean (gradient_mean_wire), and a compressed step folds each
// worker's gradient into its momentum m_i and the worker stage of the
// compressed allreduce as the cluster makes it (take_gradient), so on
// the simulator no gradient row and no m_i row is held: per worker, the
// algorithm's own error row e_i and its signs (OneBitAllreduce).
class OneBitAdam : public Optimizer {
 public:
  explicit OneBitAdam(const OneBitAdamOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // The warm-up's wire: its steps read the gradients' mean only; the
  // compressed steps take each gradient through take_gradient().
  std::optional<WireDtype> gradient_mean_wire() const override { return wire_; }
  // "warmup" (min(freeze_step, steps) steps: the gradient allreduce) and
  // "compressed" (the 1-bit allreduce of the momentum, or an fp32 allreduce
  // with compression "none"); variance_stable is priced at freeze_step, its
  // upper bound, with a note.
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;
  std::vector<std::string> warnings(int64_t steps) const override;
  const std::vector<std::string>& run_warnings() const override { return run_warnings_; }
  // Once compressed: the share of coordinates with sqrt(v*) < eps, if any.
  std::string divergence_cause() const override;
  // "warmup" or "compressed": of the last step (before the first step: of
  // step 1).
  const char* phase() const override { return phase_; }
  // The m_i rows, held with compression "none" only (folded otherwise); the
  // compressed allreduce's error rows are the collective's
  // (OneBitAllreduceSet::resident_bytes), as for 0/1 Adam.
  size_t held_worker_state_bytes() const override { return m_workers_.size() * sizeof(float); }
  uint64_t planned_state_bytes(const StateShape& s) const override;

  const OneBitAdamOptions& options() const { return opts_; }
  // The synchronised momentum m and the second moment v (frozen as v* once
  // compressed() is true).
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  // True once the warm-up is over (the next step is compressed).
  bool compressed() const { return compressed_; }
  // T_w, the last warm-up step, once known (0 when freeze_step = 0); −1 before.
  int64_t switch_step() const { return switch_step_; }
  // ρ_t of the last warm-up step (variance_stable only; NaN otherwise).
  double last_var_change() const { return last_var_change_; }
  // The compressed allreduce, one part per slice of `granularity` (null with
  // compression "none").
  const OneBitAllreduceSet* allreduce() const { return onebit_.get(); }

 private:
  void warmup_step(StepContext& ctx);
  void compressed_step(StepContext& ctx);
  // The compression stage's coefficients at step t: bias correction as the
  // options say, the variance's frozen at the switch (departure D24).
  AdamCoeffs compressed_coeffs(int64_t t) const;
  // Starts step t's compressed allreduce; take_gradient() then takes the workers.
  void begin_compressed_step(int64_t t);
  // The per-worker path (optimizer.hpp): step t takes the gradients when
  // it is compressed; take_gradient is worker i's line 9 (where m_i is formed).
  bool begin_step(int64_t t) override;
  void take_gradient(int i, std::span<const float> g) override;
  void check_frozen_variance(int64_t step);

  OneBitAdamOptions opts_;
  OneBitStages stages_;
  WireDtype wire_;
  bool variance_stable_;
  bool compress_;
  bool fused_ = false;            // reference stages: m_i formed inside the worker kernel
  uint64_t seed_ = 0;
  AdamCoeffs c_;                  // the current compressed step's (compressed_coeffs)
  int64_t folding_step_ = -1;     // the step whose gradients take_gradient() has taken
  const char* phase_ = "warmup";
  bool compressed_ = false;
  int64_t switch_step_ = -1;
  double last_var_change_;
  int workers_ = 0;
  size_t dim_ = 0;
  size_t stride_ = 0;
  std::vector<float> g_mean_;     // ḡ (warm-up)
  std::vector<float> m_;          // synchronised momentum
  std::vector<float> v_;          // second moment; v* after the switch
  std::vector<float> v_prev_;     // v_{t−1} (variance_stable only)
  WorkerRange local_;             // the workers this process computes
  std::vector<float> m_workers_;  // compression "none": local workers × stride, each m_i
  std::vector<float> scratch_;    // general stages: threads × stride, m_i while compressed
  std::vector<float> mask_;       // dim 0/1 values, or empty
  std::unique_ptr<OneBitAllreduceSet> onebit_;
  std::vector<std::string> run_warnings_;
};

}  // namespace bitlab
