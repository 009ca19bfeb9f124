// 1-bit LAMB (docs/algorithms.md §4): LAMB during a full-precision warm-up, then
// the momentum is communicated with the two-stage 1-bit compressed allreduce
// and LAMB's per-tensor trust ratio is frozen and only rescaled by a factor
// measured from a freshly tracked second moment.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizers/lamb.hpp"
#include "optimizers/onebit_stages.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/core/schema.hpp"
#include "sim/core/tensor_layout.hpp"

namespace bitlab {

// The warm-up's options are LambOptions, inherited with LAMB's defaults (lr,
// β1, β2, ε, wd, bias_correction off, the trust-ratio clamps, wire): the
// warm-up is the `lamb` optimizer run with this struct, so the two share every
// field they share by construction. Its gradient_exchange stays the default:
// 1-bit LAMB's schema refuses the key. The compression stage's own follow.
struct OneBitLambOptions : LambOptions {
  double factor_max = 4.0;
  double factor_min = 0.5;
  double factor_threshold = 0.1;
  // T_w. The reference's default is 100000 (its docs advise 15–25 % of
  // training); 100 suits bitlab's small problems.
  int64_t freeze_step = 100;
  int64_t pad_multiple = 0;          // 0: the reference's n·lcm(n, 8)
  std::string granularity = "flat";  // "flat" | "group" | "tensor"
  std::string padding = "reuse";     // "reuse" | "zeros"
  bool error_feedback = true;
  Json worker_compressor = default_stage_compressor();
  Json server_compressor = default_stage_compressor();
  static Schema<OneBitLambOptions> schema();
  // Uncompressed twin: LAMB, the paper's baseline (its warm-up is LAMB).
  static TwinDeclaration twin(const Json&) { return {"lamb", Json::object(), ""}; }
};

// 1-bit LAMB (Li, Awan, Tang, Rajbhandari, Zhang, Yang, He, "1-bit LAMB:
// Communication Efficient Large-Scale Large-Batch Training with LAMB's
// Convergence Speed", 2021, Algorithm 1), as in docs/algorithms.md §4:
//
//   warm-up, t ≤ T_w (phase "warmup"): LAMB on ḡ, exactly optimizers/lamb
//     (this class runs a Lamb object, so the warm-up is `lamb` bit-for-bit),
//     which keeps C_p = EMA of the trust ratio; at t == T_w: v_fresh = v.
//   compression, t > T_w (phase "compressed"), per tensor p:
//     first compression step only: k_p = mean_q rms(m_q) / rms(m_p)
//     m_prev = m ; worker i: m_i,p = (β1 m_p + (1−β1) g_i,p)·k_p
//     m = compressed_allreduce(m_i over ALL tensors as one flat buffer) (§1;
//         the padding keeps the previous call's output, see below)
//     m_p = m_p / k_p ; ĝ_p = (m_p − β1 m_prev_p)/(1−β1)
//     v_fresh_p = β2 v_fresh_p + (1−β2) ĝ_p²          (v stays frozen)
//     u_p = m_p ⊘ (sqrt(v_p)+ε) + wd·x_p
//     f_p = max_k (sqrt(v_p,k)+ε)/(sqrt(v_fresh_p,k)+ε)
//       wd > 0: ρ = min(1, ‖m_p ⊘ (sqrt(v_p)+ε)‖/‖u_p‖), f_p = f_p·ρ + (1−ρ)
//     f_p = clamp(f_p, factor_min, factor_max), then clamp to
//       [last_f_p·(1−factor_threshold), last_f_p·(1+factor_threshold)]
//     x_p = x_p − lr·C_p·f_p·u_p ;  last_f_p = f_p
//
// Choices and departures (each checked against DeepSpeed's OnebitLamb,
// deepspeed/runtime/fp16/onebit/lamb.py):
// - last_f_p starts at 1.0, as in the reference (state['last_factor'] = 1.0).
//   So the first compression step's f_p lies in [1−threshold, 1+threshold],
//   and f_p stays in [factor_min, factor_max] by induction when 1 is in that
//   range (the defaults); when it is not, the threshold clamp, applied last as
//   in the reference, wins and f_p walks towards the range by at most
//   `factor_threshold` per step.
// - Zero-momentum guard: if some tensor's momentum is exactly zero at the
//   first compression step, the reference divides by zero (k_p = inf, then
//   NaN parameters). We throw a ConfigError (a std::runtime_error) instead,
//   naming the tensor and the step, rather than falling back to k_p = 1: a
//   tensor whose averaged gradient was exactly 0 through the whole warm-up
//   cannot be carried by a 1-bit compressor either (1 bit cannot say 0; the
//   reference needs a momentum mask for such coordinates), so a silent
//   fallback would hide a drifting tensor.
// - bias_correction (off by default) makes the warm-up `lamb` with
//   bias_correction on, and then (departure D24, as 1-bit Adam) the
//   compression stage divides m by 1−β1^t and the frozen v (and v_fresh, so
//   f_p starts at 1) by 1−β2^T_w, so u_p does not jump at the switch; the
//   reference accepts the flag and applies it nowhere.
// - The reference's momentum mask (exp_avg_mask) is not offered, nor its
//   "initialization call" that consumes the first step without updating (an
//   artefact of its engine), nor its reset of the errors on checkpoint load.
// - Granularity: the reference fuses every momentum of every group into one
//   flat buffer (exp_avg_flat) in both its fp16 and fp32 paths, so the
//   default "flat" (= "group" here) is the reference; "tensor" (one
//   compressed allreduce per tensor, each its own padding, errors and
//   scales) is a bitlab ablation, not the reference's.
// - Padding: the reference's padding (dummy_exp_avg) lives inside its
//   persistent fused buffer, which compressed_allreduce overwrites with its
//   output; the momentum update and the k_p scaling touch only the tensors'
//   parts. So the padding is zero at the first compression step and, from the
//   second on, holds what the previous call decoded there (1-bit Adam and 0/1
//   Adam pad with fresh zeros). `padding: "reuse"` (default) does this;
//   "zeros" (bitlab's behaviour before, fresh zeros each call) is the
//   ablation. With "tensor", each tensor's padding is reused on its own.
// - One worker (n = 1): the reference skips the compressed allreduce
//   (`if self.size > 1`), so its m is the local momentum (times k_p, divided
//   by k_p); we compress for any n (departure D3), and there is no option
//   for the reference's n = 1 behaviour.
// - The switch happens after step T_w (reference: `step >= freeze_step`
//   flips the mode at the end of the step), so steps 1..T_w are LAMB. The
//   compression errors are zero at the first compression step.
// - C_p keeps the reference's quirks (LAMB, optimizers/lamb.hpp): EMA from 0,
//   skipped when r_p == 1. A tensor whose trust ratio was always the guard's 1
//   ends the warm-up with C_p = 0 and is then never updated.
// - Arithmetic: elementwise work is in float; k_p, norms, ρ and f_p in double
//   (norms over fixed blocks, sim/kernels/reduce.hpp); k_p is rounded to float where
//   it multiplies or divides the momentum, and lr·(C_p·f_p) is rounded to
//   float once, as PyTorch does with the Python scalars. max over k is exact,
//   so every result is bit-identical for any thread count.
// Memory: the warm-up's Lamb keeps its own m, v; at the switch they are
// copied once into this class's buffers (the compression stage then owns m,
// v, v_fresh). No per-worker momentum row is held: each m_i is formed in a
// per-thread row and handed to the worker stage (take_gradient(), below).
//
// Compressor per stage (docs/algorithms.md §1, "Compressor per stage"):
// `worker_compressor` and `server_compressor` choose the compressor of each
// stage of the compressed allreduce ({"name": ..., options..., with an optional
// "error_feedback"}); the default {"name": "sign"} at both is the paper's
// collective bit for bit, anything else compresses each chunk on its own and
// logs two collectives of the compressors' exact image sizes. binarize is
// refused (exit 2). Under MPI the stages' own wire images travel.
//
// Memory: as 1-bit Adam (optimizers/onebit_adam.hpp), the warm-up reads the
// gradients' mean and a compressed step folds each worker's gradient into its
// scaled momentum and the worker stage as the cluster makes it (take_gradient()), so
// the simulator holds no gradient or momentum row per worker.
class OneBitLamb : public Optimizer {
 public:
  explicit OneBitLamb(const OneBitLambOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // The warm-up's (LAMB's) wire; the compressed steps fold each gradient.
  std::optional<WireDtype> gradient_mean_wire() const override {
    return warmup_.gradient_mean_wire();
  }
  // "warmup" (min(freeze_step, steps) steps: LAMB's gradient allreduce) and
  // "compressed" (the 1-bit allreduce of the momentum).
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;
  std::vector<std::string> warnings(int64_t steps) const override;
  const char* phase() const override { return phase_; }
  // No m_i row is held (take_gradient()); the compressed allreduce's error rows are
  // the collective's (OneBitAllreduceSet::resident_bytes).
  size_t held_worker_state_bytes() const override { return 0; }
  uint64_t planned_state_bytes(const StateShape& s) const override;

  const OneBitLambOptions& options() const { return opts_; }
  bool compressing() const { return switched_; }
  // m and v: the warm-up's until the switch, then this class's (v frozen).
  std::span<const float> m() const;
  std::span<const float> v() const;
  // v_fresh (zero until step T_w, then a copy of v, then updated).
  std::span<const float> v_fresh() const { return v_fresh_; }
  // C_p, one per tensor: LAMB's running EMA during warm-up, frozen after.
  std::span<const double> coeff_ema() const;
  // k_p, one per tensor; 0 until the first compression step computes them.
  std::span<const double> scaling_coeffs() const { return scaling_; }
  // f_p of the last compression step (= last_f_p); 1.0 before the first.
  std::span<const double> factors() const { return last_factor_; }
  // The warm-up optimizer (its trust ratios, moments).
  const Lamb& warmup() const { return warmup_; }
  // The compressed allreduce (its errors, scales), one part per slice of
  // `granularity`; null before setup().
  const OneBitAllreduceSet* onebit() const { return onebit_.get(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  void enter_compression();
  void compute_scaling_coeffs(int64_t step);
  void compressed_step(StepContext& ctx);
  // The compression stage's coefficients at step t (D24 with bias correction).
  AdamCoeffs compressed_coeffs(int64_t t) const;
  // Step t's preparation (the switch's copies, k_p, the allreduce's begin).
  void begin_compressed_step(int64_t t);
  // The per-worker path (optimizer.hpp): step t takes the gradients when
  // it is compressed; take_gradient forms worker i's momentum.
  bool begin_step(int64_t t) override;
  void take_gradient(int i, std::span<const float> g) override;

  OneBitLambOptions opts_;
  OneBitStages stages_;
  Lamb warmup_;
  const char* phase_ = "warmup";
  bool switched_ = false;
  bool have_scaling_ = false;
  int workers_ = 0;
  size_t dim_ = 0;
  size_t stride_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<float> m_;         // synchronised momentum (compression stage)
  std::vector<float> m_prev_;    // m of the previous step
  std::vector<float> v_;         // frozen second moment
  std::vector<float> v_fresh_;   // v_fresh
  std::vector<float> u_prelim_;  // m ⊘ (sqrt(v)+ε)
  std::vector<float> u_;         // u_prelim + wd·x
  WorkerRange local_;            // the workers this process computes
  std::vector<float> scratch_;   // threads × stride_: m_i of the worker being folded
  uint64_t seed_ = 0;
  AdamCoeffs c_;                 // the current compressed step's
  int64_t folding_step_ = -1;    // the step whose gradients take_gradient() has taken
  std::vector<float> k_elem_;    // float(k_p) of each element's tensor
  std::unique_ptr<OneBitAllreduceSet> onebit_;
  std::vector<double> coeff_frozen_;  // C_p at the switch
  std::vector<double> scaling_;       // k_p
  std::vector<float> scaling_f_;      // float(k_p)
  std::vector<double> last_factor_;   // last_f_p
};

}  // namespace bitlab
