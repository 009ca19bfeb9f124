// LoCo's exchange as the reference runs it (docs/algorithms.md §6): DeepSpeed's
// `all_to_all_loco_quant_reduce` (deepspeed/runtime/comm/coalesced_collectives.py,
// PR 6730) with its kernels `loco_swizzled_quant_kernel`
// (csrc/quantization/swizzled_quantize.cu) and `loco_dequant_reduce`
// (csrc/quantization/quant_reduce.cu), as ZeRO-3's `__avg_scatter_grads`
// (runtime/zero/stage3.py) calls it. n workers on nodes of g; per tensor, in
// the model's tensor order:
//
// * Engagement. With one node nothing is quantized: every tensor goes by a
//   plain reduce-scatter. With more, a 1-D tensor, or one whose size N is not
//   divisible by 2n, also falls back to the plain reduce-scatter (no error).
// * Groups. The tensor is cut into n partitions of P = N/n elements
//   (partition z = a·g + b ends at worker z: node a, local rank b), each of
//   k groups of e = P/k elements; the reference asks for
//   G = max(rows, cols, n) groups, k = G/n. Where n does not divide G the
//   reference leaves groups unquantized (undefined output); bitlab takes the
//   smallest k ≥ ⌈G/n⌉ that divides P — a flagged departure that only
//   applies where the reference has no defined result.
// * Stage 1 (every worker w, error e1_w over the N elements):
//     h = grad + e1;  q1 = Q_b(h) (groups of e);  e1 = β e1 + (1−β)(h − q1)
//   then e1 is stored 8-bit (Q_8 in the same groups) when storage is 8.
//   Intra-node all-to-all: worker (i, b) receives, from each local peer
//   (i, j), the codes and scales of the partitions a·g + b of every node a.
// * Stage 2 (worker (i, b), error e2 over its nodes·P elements):
//     s = Σ_j q1_(i,j)  (j = 0..g−1 in order; then ÷g unless node_reduce is
//     "sum", the reference's scale);  h2 = s + e2;  q2 = Q_b(h2);
//     e2 = β e2 + (1−β)(h2 − q2), stored like e1.
//   Inter-node all-to-all among the workers of local rank b: the part for
//   partition a·g + b goes to node a.
// * Result at worker z = a·g + b: out_z = (Σ_i q2_(i,b)[part a]) / nodes
//   (i = 0..nodes−1 in order), partition z of the mean gradient. With
//   node_reduce "sum" it is g× the mean: the reference's node reduction sums
//   without dividing (only the node count divides), so its compressed
//   tensors come out g× the fallback ones. bitlab divides by g at the node
//   reduction by default (for a power-of-two g the reference's values ÷ g
//   exactly, the quantizer being scale-equivariant for powers of two).
// * Reset. One counter over the compressed-tensor calls (the reference's
//   global `loco_idx`): a tensor's first call, or any call that finds the
//   counter above reset_T, zeroes that tensor's e1 and e2 before use and
//   restarts the counter; every call then adds 1. So resets come every
//   reset_T + 1 calls and hit one tensor at a time. reset_T = 0: never
//   (bitlab's; the reference has no "never").
// * Completion (bitlab's, not the reference's): bitlab has no ZeRO-3
//   sharding, so after the reduce each worker needs the whole mean. The
//   partitions are allgathered in the `wire` precision (the reference's
//   ZeRO-3 parameter allgather is fp16), logged as its own record, last.
//
// Records per step, per tensor in order: compressed — alltoall of codes
// (intra, g ranks, nodes groups, S = ⌈N·b/8⌉), alltoall of scales (intra,
// S = 4·n·k), alltoall of codes (inter, nodes ranks, g groups,
// S = ⌈(N/g)·b/8⌉), alltoall of scales (inter, S = 4·nodes·k); fallback — one
// reduce_scatter (all, n ranks, S = N·wire bytes). Then the completing
// allgather (all, n ranks, S = d·wire bytes).
//
// Arithmetic is fp32 between the b-bit and 8-bit roundings (the reference
// works on fp16 gradients and errors; docs/algorithms.md D21). Simulator only:
// the MPI backend refuses this exchange (optimizers/loco.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/core/state_archive.hpp"
#include "sim/core/tensor_layout.hpp"
#include "sim/kernels/quantize_spec.hpp"

namespace bitlab {

struct LocoExchangeOptions {
  int bits = 4;
  bool stochastic = false;            // stochastic rounding of Q_b
  float err_beta = 0.8f;              // β
  int64_t reset_T = 1024;             // NOLINT: the paper's name; 0 = never
  int storage_bits = 8;               // 8: errors stored Q_8 between steps; 32: fp32
  WireDtype wire = WireDtype::kFp16;  // fallback reduce-scatter and completing allgather
  bool node_sum = false;              // true: the reference's g× scale (see above)
};

// How one tensor is exchanged.
struct LocoTensorPlan {
  size_t offset = 0, size = 0;  // in the flat parameter vector
  bool compressed = false;
  size_t partition = 0;      // P = size / n (compressed only)
  size_t group = 0;          // e: elements per quantization group
  size_t stage2_offset = 0;  // into each worker's stage-2 row
};

class LocoTwoStageExchange {
 public:
  // tensors: the model's layout (empty: one square tensor of `dim`); g: workers
  // per node (0 or n: one node). Throws std::invalid_argument when g does not
  // divide n or the tensors do not tile [0, dim).
  LocoTwoStageExchange(int workers, size_t dim, std::vector<TensorInfo> tensors, int node_size,
                       const LocoExchangeOptions& options);

  // out = the mean gradient (see above) from every worker's `grads`.
  // Random streams (stochastic rounding only): RngStream(seed, kCompress, w,
  // step) for stage 1 of worker w, worker id n + w for its stage 2; element k
  // of a tensor at offset o draws block o + k (stage 2: its row position).
  void run(Communicator& comm, const WorkerBuffers& grads, std::span<float> out, uint64_t seed,
           int64_t step);

  static std::vector<LocoTensorPlan> layout(const std::vector<TensorInfo>& tensors, int workers,
                                            int node_size);
  // The records one run() logs, in order.
  static std::vector<CommRecord> plan(const std::vector<TensorInfo>& tensors, int workers,
                                      int node_size, int bits, WireDtype wire);
  // tensors as the exchange reads them: `tensors`, or one square tensor of dim.
  static std::vector<TensorInfo> tensors_or_square(std::vector<TensorInfo> tensors, size_t dim);

  int nodes() const { return nodes_; }
  bool compresses() const { return compressed_tensors_ > 0; }
  int compressed_tensors() const { return compressed_tensors_; }
  const std::vector<LocoTensorPlan>& tensor_plans() const { return plans_; }
  // Of the last run, worker w's rows: q1 = Q(h) of stage 1 (dim values;
  // fallback tensors' slices 0), e1 (dim), and the stage-2 q2 and e2
  // (stage2_len values: the compressed tensors' nodes·P parts in order).
  std::span<const float> stage1(int w) const { return row(q1_, dim_, w); }
  std::span<const float> error1(int w) const { return row(e1_, dim_, w); }
  std::span<const float> stage2(int w) const { return row(q2_, stage2_len_, w); }
  std::span<const float> error2(int w) const { return row(e2_, stage2_len_, w); }
  int64_t reset_counter() const { return counter_; }
  // What the constructor allocates (the memory check): every worker's
  // first-stage codes and error (d floats each) and, with more than one node,
  // its second-stage ones (d/g each at most: the compressed tensors' share).
  static uint64_t resident_bytes_for(int workers, int node_size, size_t dim) {
    const int g = node_size > 0 ? node_size : workers;
    const uint64_t n = static_cast<uint64_t>(workers), d = dim;
    return 8 * n * d + (workers / g > 1 ? 8 * n * (d / static_cast<uint64_t>(g)) : 0);
  }
  size_t resident_bytes() const {
    return (q1_.size() + e1_.size() + q2_.size() + e2_.size()) * sizeof(float);
  }
  void serialize(StateArchive& io);

 private:
  static std::span<const float> row(const std::vector<float>& v, size_t len, int w) {
    return {v.data() + static_cast<size_t>(w) * len, len};
  }
  void apply_resets();
  void stage1(const WorkerBuffers& grads, uint64_t seed, int64_t step);
  void stage2(uint64_t seed, int64_t step);
  void finish(const WorkerBuffers& grads, std::span<float> out);

  int n_, g_, nodes_;
  size_t dim_, stage2_len_ = 0;
  LocoExchangeOptions opts_;
  std::vector<LocoTensorPlan> plans_;
  int compressed_tensors_ = 0;
  std::vector<CommRecord> records_;
  std::vector<uint8_t> started_;  // per tensor: its errors exist (the reference's hasattr)
  std::vector<uint8_t> reset_now_;
  int64_t counter_ = 0;         // the reference's loco_idx
  std::vector<float> q1_, e1_;  // n × dim
  std::vector<float> q2_, e2_;  // n × stage2_len
};

}  // namespace bitlab
