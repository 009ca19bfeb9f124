// BinSGDM (anonymous ICLR 2023 submission "BinSGDM: Extreme One-Bit
// Quantization for Communication Efficient Large-Scale Distributed Training",
// also circulated as Birder; docs/algorithms.md §7). **[verify]** Reconstructed
// from the abstract and secondary sources, not from the full paper or code.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/compressed_collectives.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct BinSgdmOptions {
  double lr = 1e-3;
  double beta = 0.9;
  double eps = 1e-8;
  double weight_decay = 0.0;
  std::string denominator = "abs_ema";  // abs_ema | sqrt_ema
  bool amsgrad = false;
  int64_t node_size = 0;
  uint64_t compress_seed = 0;
  static Schema<BinSgdmOptions> schema();
  // No uncompressed twin: the binarization is the update itself.
  static TwinDeclaration twin(const Json&) {
    return {"", Json::object(),
            "binsgdm has no uncompressed twin: its update is the binarization itself (compare "
            "with adam in a sweep instead)"};
  }
};

// One bit per element, no warm-up, no error feedback (docs/algorithms.md §7):
//   m_i = β m_i + (1−β) g_i
//   b_i = β b_i + (1−β) |g_i|                 denominator "abs_ema" (same β: |m_i| ≤ b_i,
//                                              exactly, also in float: rounding is monotone)
//   or   v_i = β v_i + (1−β) g_i², b_i = sqrt(v_i)    "sqrt_ema" (|m_i| ≤ b_i in real
//                                              arithmetic by Cauchy–Schwarz)
//   amsgrad: b̂_i = max(b̂_i, b_i), used instead of b_i (AMSGrad's form, Reddi et al.
//            2018: the EMA itself runs on; "theory only" in the paper)
//   z_i = m_i ⊘ (b_i + ε) ∈ [−1, 1]
//   q_i = +1 with probability (1+z_i)/2, else −1          E[q_i] = z_i, Var = 1 − z_i²
//   ū   = mean_i q_i                         CompressedAllgatherMean, `binarize` compressor
//   x   = x − lr·(ū + wd·x)
// Flat (node_size 0, 1 or n): every worker's bit-vector is allgathered,
// ceil(d/8) bytes each. Hierarchical (1 < node_size < n): mean within a node,
// the node leader re-binarizes the node mean the same way, one bit-vector per
// node crosses the network (allgather among leaders), then a broadcast inside
// each node — the scheme of the abstract.
// Uncertain, hence options: the denominator (the abstract calls it an
// Adam-like normalisation; abs_ema is our reading, sqrt_ema Adam's) and
// amsgrad. No bias correction: with abs_ema the corrections of m and b cancel
// in z (both are EMAs with the same β from 0); with sqrt_ema z is smaller by
// sqrt(1−β^t) in the first steps. Binarization draws come from
// RngStream(compress_seed, kCompress, worker, step) (node leaders: worker n +
// node); the stream seed mixes the run seed with the compress_seed option. Default lr 1e-3: ū
// has entries in [−1, 1], the scale of Adam's normalised step.
// Per-worker state m_i, b_i, z_i (d floats each, plus b̂_i with amsgrad) and
// the collective's C(z_i) = q_i, for this process's workers only: all n in
// the simulator, the rank's block under the MPI backend (worker i
// at row i − first).
class BinSgdm : public Optimizer {
 public:
  explicit BinSgdm(const BinSgdmOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // One phase, "onebit": the compressed allgather mean of the packed signs,
  // flat or by node.
  CommPlan comm_plan(const PlanShape& shape) const override;
  void serialize(StateArchive& io) override;
  const char* phase() const override { return "onebit"; }
  // m, b, z (AMSGrad: and b̂) rows of every resident worker, ū (d floats),
  // and the allgather's buffers.
  uint64_t planned_state_bytes(const StateShape& s) const override {
    const uint64_t d = s.dim, rows = opts_.amsgrad ? 4 : 3;
    return rows * 4 * d * static_cast<uint64_t>(s.resident) + 4 * d +
           CompressedAllgatherMean::resident_bytes_for(s.workers, static_cast<int>(opts_.node_size),
                                                       s.resident, d);
  }
  // Counted: m_i, b_i, z_i (and b̂_i) of the resident workers, plus the
  // allgather's resident rows (q_i of those workers and, hierarchical, the
  // node means this process forms); not its transient receive scratch.
  size_t held_worker_state_bytes() const override {
    return (m_.size() + b_.size() + bmax_.size() + z_.size()) * sizeof(float) +
           (ag_ ? ag_->resident_bytes() : 0);
  }

  const BinSgdmOptions& options() const { return opts_; }
  std::span<const float> m(int worker) const { return row(m_, worker); }
  // b_i: the EMA of |g_i| (abs_ema) or of g_i² (sqrt_ema).
  std::span<const float> b(int worker) const { return row(b_, worker); }
  // z_i and q_i (±1) of the last step. Accessors take global worker ids of
  // resident workers.
  std::span<const float> z(int worker) const { return row(z_, worker); }
  std::span<const float> q(int worker) { return ag_->compressed()[worker]; }
  // ū of the last step.
  std::span<const float> update() const { return u_; }
  bool hierarchical() const { return ag_ && ag_->hierarchical(); }

 private:
  std::span<const float> row(const std::vector<float>& a, int worker) const {
    return {a.data() + static_cast<size_t>(worker - local_.begin) * stride_, dim_};
  }
  BinSgdmOptions opts_;
  bool sqrt_ema_;
  int workers_ = 0;
  size_t dim_ = 0;
  size_t stride_ = 0;
  WorkerRange local_;        // the workers this process computes
  std::vector<float> m_;     // local workers × stride
  std::vector<float> b_;     // local workers × stride
  std::vector<float> bmax_;  // local workers × stride, amsgrad only: b̂ = max over steps
  std::vector<float> z_;     // local workers × stride
  std::vector<float> u_;     // ū
  std::unique_ptr<CompressedAllgatherMean> ag_;
};

}  // namespace bitlab
