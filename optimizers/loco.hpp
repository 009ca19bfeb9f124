// LoCo, the Low-bit Communication Adaptor (Xie et al., "LoCo: Low-Bit
// Communication Adaptor for Large-scale Model Training", 2024;
// docs/algorithms.md §6): error-compensated 4-bit gradient exchange wrapped around
// an unchanged full-precision optimizer (Adam/AdamW or momentum SGD).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizers/adam_hyperparams.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/collectives/compressed_collectives.hpp"
#include "sim/collectives/loco_exchange.hpp"
#include "sim/compress/error_feedback.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct LocoOptions : AdamHyperparams {
  // The wrapped optimizer and its hyperparameters: adam's are PyTorch's Adam
  // defaults (LoCo wraps a standard optimizer).
  LocoOptions()
      : AdamHyperparams{
            .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.0,
            .bias_correction = true} {}
  std::string base = "adam";  // adam | momentum_sgd
  double lr = 1e-3;
  double momentum = 0.9;
  bool nesterov = false;
  // The compressor and the error buffer.
  int64_t bits = 4;
  int64_t group_size = 128;
  std::string rounding = "nearest";  // nearest | stochastic
  double err_beta = 0.8;
  int64_t reset_T = 1024;  // NOLINT: the paper's name
  int64_t error_storage_bits = 8;
  // The exchange.
  std::string exchange = "two_stage";  // two_stage (the reference's) | flat | allgather
  std::string gather = "fp16";         // quantized | fp16 | fp32
  int64_t node_size = 0;
  std::string node_reduce = "mean";  // two_stage: mean | sum (the reference's scale)
  uint64_t compress_seed = 0;
  static Schema<LocoOptions> schema();
  // Uncompressed twin: its base optimizer (adam or momentum_sgd), unchanged.
  static TwinDeclaration twin(const Json& resolved) {
    return {resolved.at("base").get<std::string>(), Json::object(), ""};
  }
  QuantizeSpec spec() const;
};

// Every step, every worker i (docs/algorithms.md §6; the paper's Algorithm 1):
//   h_i = g_i + e_i                          compensate
//   ĥ_i = Q_b(h_i)                           b-bit symmetric per-group quantizer (§1)
//   e_i = β·e_i + (1−β)·(h_i − ĥ_i)          moving average of the errors, β = err_beta
//         (stored 8-bit quantized per group when error_storage_bits = 8, as LoCo does)
//   every reset_T steps: e_i = 0
//   ḡ   = mean_i ĥ_i                         exchanged as b-bit codes + group scales
//   base optimizer step on ḡ                 Adam/AdamW (§2) or momentum SGD, unchanged
// The error update uses exactly the ĥ_i that went on the wire: the collective
// quantizes h_i itself and the error feedback reads its per-worker view.
//
// exchange = "two_stage" (default): the reference's exchange
// (LocoTwoStageExchange, sim/collectives/loco_exchange.hpp; DeepSpeed's
// all_to_all_loco_quant_reduce): per tensor, an intra-node all-to-all of the
// 4-bit codes of g_i + e1_i, a node reduction plus the second-stage error e2,
// re-quantized, an inter-node all-to-all; each stage with its own error
// buffer, both stored 8-bit; 1-D tensors, tensors whose size 2n does not
// divide, and every tensor on a single node go by a plain reduce-scatter;
// groups max(rows, cols, n) per tensor; the reset counter over tensor calls.
// node_size 0 takes the network's GPUs per node (one node without a network
// model: nothing is compressed, and the run warns). bitlab completes the
// exchange with an allgather of the reduced partitions in `gather` precision
// (fp16 or fp32), logged last. The steps above (h_i, e_i, reset_T) describe
// the two older exchanges; two_stage keeps its errors inside the exchange.
// Under MPI the ranks are grouped by node as DeepSpeed groups them and the
// all-to-alls carry the codes and scales (loco_exchange.hpp).
// n = 1 is one node: two_stage quantizes nothing, as the reference (whose
// LoCo path needs more than one node); flat and allgather still quantize.
// Departures that remain: fp32 arithmetic (the reference's is fp16), the
// node reduction divides by g (node_reduce "sum" keeps the reference's g×
// scale), groups where the reference's group count is not a multiple of n.
//
// exchange = "flat": QuantizedReduceScatter — an alltoall of the
// codes (chunk r of every worker to worker r), worker r averages its chunk,
// and an allgather returns the averaged chunks. `gather` picks the precision
// of that allgather. Default "fp16", not "quantized" (docs/algorithms.md §6):
// in the reference (DeepSpeed ZeRO++ `all_to_all_loco_quant_reduce`, which is
// how LoCo ships) only the reduce-scatter is quantized, and what returns to
// every rank afterwards is the optimizer's result on its partition, allgathered
// in fp16/bf16 (ZeRO-3) — byte for byte an fp16 allgather of ḡ in this
// data-parallel simulator, and it adds no second, uncompensated quantization
// error. "quantized" re-quantizes the averaged chunk with the same b bits and
// no error buffer (the most aggressive choice); "fp32" is exact.
//
// exchange = "allgather": CompressedAllgatherMean with the n-bit compressor: inside each
// node the workers' b-bit images are allgathered and averaged, each node
// leader re-quantizes the node mean (b bits, no error buffer), the leaders
// allgather across nodes and broadcast inside the node. Departure from the
// reference's hierarchical mode: its second stage keeps its own error buffer
// (inter_ef_buf); here stage 2 has none. node_size = 1 or n is a flat
// allgather of every worker's b-bit image. `gather` does not apply.
//
// Departures of "flat" and "allgather" (kept so that earlier experiments can
// be re-run), flagged:
// * Quantization groups: fixed `group_size` (default 128) consecutive elements
//   of the flat parameter vector, crossing tensor boundaries. The reference
//   uses max(rows, cols, world size) groups per tensor, i.e. groups of about
//   min(rows, cols) elements (thousands for a transformer layer) — coarser,
//   so a larger error; set group_size to match.
// * The reset counter counts optimizer steps (the reference ticks per tensor
//   call, an artefact).
// * The 8-bit error storage uses groups of `group_size` elements.
// * The quantizer's random streams (rounding = stochastic only) come from
//   splitmix64(run seed ^ splitmix64(compress_seed)), combined with the step and worker.
// * Weight decay follows the base: decoupled (AdamW) for adam, coupled (added
//   to the gradient, torch.optim.SGD) for momentum_sgd. The default lr (1e-3)
//   suits Adam; set it explicitly for momentum_sgd.
// The base's element math is the base optimizers' own (adam_update_elements;
// MomentumSgd's loop, reproduced), so with an exact quantizer LoCo is the base
// optimizer bit for bit (tests/test_loco.cpp).
class Loco : public Optimizer {
 public:
  explicit Loco(const LocoOptions& opts);
  void setup(Cluster& cluster) override;
  void finish_step(StepContext& ctx) override;
  // One phase, "compressed": the exchange's records (two_stage: per tensor,
  // from shape.tensors and shape.gpus_per_node; flat: the quantized
  // reduce-scatter; allgather: the n-bit compressed allgather mean).
  CommPlan comm_plan(const PlanShape& shape) const override;
  // two_stage on a single node (nothing compressed), said before the run.
  std::vector<std::string> warnings(int64_t steps) const override;
  void serialize(StateArchive& io) override;
  const char* phase() const override { return "compressed"; }
  uint64_t planned_state_bytes(const StateShape& s) const override;
  // Counted, for this process's workers (its rank's block under MPI): h_i,
  // the error-feedback rows e_i, and the collective's resident rows — the
  // reduce-scatter's Q(h_i) (padded length), or the allgather's C(h_i) and the
  // node means this process forms. Not counted: the collectives' transient
  // receive scratch (reduce-scatter: every worker's codes of this rank's
  // chunks, decoded; allgather: the gathered wire images and log2(n) partial
  // sums of the streamed tree mean).
  // two_stage: the exchange's q1, e1, q2, e2 rows (this process's workers').
  size_t held_worker_state_bytes() const override {
    if (two_) return two_->resident_bytes();
    return h_.size() * sizeof(float) + ef_->resident_bytes() +
           (rs_ ? rs_->resident_bytes() : ag_->resident_bytes());
  }

  const LocoOptions& options() const { return opts_; }
  // e_i after the last step (two_stage: the first-stage error e1_i). Worker
  // ids are global; only this process's workers (all in the simulator) are held.
  std::span<const float> error(int worker) const {
    return two_ ? two_->error1(worker) : ef_->error(worker);
  }
  // ĥ_i = Q(h_i) of the last step, exactly what went on the wire (two_stage:
  // the first stage's; fallback tensors' slices are 0).
  std::span<const float> quantized(int worker);
  // The two-stage exchange (null for flat and allgather).
  const LocoTwoStageExchange* two_stage() const { return two_.get(); }
  // ḡ of the last step.
  std::span<const float> mean_gradient() const { return g_mean_; }
  std::span<const float> m() const { return m_; }
  std::span<const float> v() const { return v_; }
  bool uses_reduce_scatter() const { return rs_ != nullptr; }
  // Bytes one worker sends per step with the reduce-scatter exchange.
  double reduce_scatter_bytes_per_step() const { return rs_ ? rs_->sent_bytes_per_call() : 0.0; }

 private:
  // flat / allgather: h_i = g_i + e_i, the exchange of Q(h_i), the error update.
  void exchange_compensated(StepContext& ctx, uint64_t seed);
  // The base optimizer on ḡ.
  void base_step(StepContext& ctx);

  LocoOptions opts_;
  QuantizeSpec spec_;
  bool adam_;
  int workers_ = 0;
  int network_gpus_per_node_ = 0;  // the cluster's (0: no network model)
  size_t dim_ = 0;
  size_t stride_ = 0;
  std::vector<float> h_;  // local workers × stride: compensated gradients
  std::vector<float> g_mean_;
  std::vector<float> m_;  // adam: first moment; momentum_sgd: momentum buffer
  std::vector<float> v_;  // adam only
  std::unique_ptr<ErrorFeedback> ef_;
  std::unique_ptr<QuantizedReduceScatter> rs_;
  std::unique_ptr<CompressedAllgatherMean> ag_;
  std::unique_ptr<LocoTwoStageExchange> two_;
};

}  // namespace bitlab
