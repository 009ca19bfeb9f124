// PowerSGD as PyTorch's DDP runs it: torch 1.13's `powerSGD_hook`
// (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py) over DDP's
// gradient buckets (torch/nn/parallel/distributed.py, _ddp_init_helper;
// the Reducer's rebuild_buckets and compute_bucket_assignment_by_size,
// torch/csrc/distributed/c10d/reducer.cpp). Paper: Vogels, Karimireddy &
// Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for Distributed
// Optimization", NeurIPS 2019, Algorithm 1 (docs/algorithms.md §10).
//
// * Buckets. Step 1 (DDP's first iteration) has one bucket holding every
//   tensor in the model's order (1.13 disables bucketing until the rebuild).
//   From step 2 on, the buckets are rebuilt from the order in which the
//   gradients became ready (`ready_order`: the Python bridge records it from
//   the model's first backward; bitlab's own problems take the reverse of
//   their tensor order, the order a backward pass produces them): tensors are
//   added in that order until a bucket holds ≥ its cap (1 MiB for the first,
//   bucket_cap_mb MiB after), bucket 0 first.
// * Steps before start_powerSGD_iter (counted from 0, as the hook's
//   state.iter): the plain mean, one allreduce per bucket.
// * After, per bucket in index order, each worker's M = g (+ its error e
//   when use_error_feedback); each tensor viewed as shape[0] × rest, rank
//   r = min(rows, cols, matrix_approximation_rank), compressed only when
//   (rows + cols)·r·min_compression_rate < rows·cols. The uncompressed
//   tensors are averaged (allreduce 1). Q is drawn (first use, or every step
//   without warm_start: one draw from the seeded stream per bucket) or the
//   last step's Q is reused, and orthogonalized; P_w = M_w·Q, P = Σ_w P_w
//   (allreduce 2: summed, not averaged), orthogonalized; Q_w = M_wᵀ·P,
//   Q = mean_w Q_w (allreduce 3); the tensor becomes P·Qᵀ on every worker.
//   With error feedback e = M − result over the whole bucket.
// * Order of the compressed tensors inside a bucket: grouped by their
//   rows × cols view, groups in order of first appearance (the hook's
//   shape_to_tensors); Q's draws follow this order.
//
// Departures (docs/algorithms.md §10): the sums over workers are the
// simulator's fixed tree (P's sum is the tree mean times n: the sum itself
// for a power-of-two n, within one rounding of it otherwise); the products
// sum in double (kernels/low_rank.hpp); Q's random start on bitlab's own
// problems is drawn from bitlab's stream (Philox, Purpose::kLowRank) instead
// of torch.randn seeded from numpy's RandomState (the Python bridge draws
// exactly as the hook does, through set_random_start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/comm/comm_plan.hpp"
#include "sim/core/state_archive.hpp"
#include "sim/core/tensor_layout.hpp"
#include "sim/kernels/worker_mean.hpp"

namespace bitlab {

// The fields and defaults of torch 1.13's PowerSGDState, plus DDP's
// bucket_cap_mb.
struct PowerSgdOptions {
  int64_t matrix_approximation_rank = 1;
  int64_t start_powerSGD_iter = 1000;
  double min_compression_rate = 2.0;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0.0;
  int64_t random_seed = 0;
  bool batch_tensors_with_same_shape = false;
  double bucket_cap_mb = 25.0;
};

// DDP's compute_bucket_assignment_by_size for one dtype: tensors (indices into
// `bytes`) taken in `order`, a bucket closed once it holds ≥ its limit
// (limits[0] for the first, then the next, the last one repeating).
std::vector<std::vector<int>> ddp_bucket_assignment(const std::vector<uint64_t>& bytes,
                                                    const std::vector<int>& order,
                                                    const std::vector<uint64_t>& limits);

// One compressed matrix of a bucket (a tensor viewed as rows × cols).
struct LowRankMatrix {
  int tensor = 0;
  size_t offset = 0;  // in the flat parameter vector
  size_t rows = 0, cols = 0, rank = 0;
  size_t p_offset = 0, q_offset = 0;  // in the bucket's P and Q buffers
};

// One bucket's plan: which tensors, which compressed, the sizes on the wire.
struct PowerSgdBucket {
  std::vector<int> tensors;               // in bucket order
  std::vector<LowRankMatrix> compressed;  // grouped by shape, as the hook orders them
  std::vector<int> uncompressed;          // tensor indices, in bucket order
  size_t elements = 0, uncompressed_elements = 0, p_size = 0, q_size = 0;
  // Q's shapes as the hook draws them: (batch, cols, rank), one per tensor,
  // or one per shape group when batch_tensors_with_same_shape.
  std::vector<std::array<size_t, 3>> draw_shapes;
};

// Fills one bucket's Q buffer (q_size floats, the draw_shapes in order, each
// row-major) with its random start, the `draw`-th since the run began (0
// first): the Python bridge's torch.randn, seeded as the hook seeds it.
using RandomStartFn =
    std::function<void(int64_t draw, const PowerSgdBucket& bucket, std::span<float> q)>;

class PowerSgdExchange {
 public:
  // Tensors with rows = 0 are 1-D (viewed as size × 1, as the hook's
  // view(shape[0], -1) does); none at all: the whole vector as one 1-D tensor.
  PowerSgdExchange(const PowerSgdOptions& opts, int workers, size_t dim,
                   std::vector<TensorInfo> tensors);
  // The gradients' ready order for the rebuilt buckets (tensor indices, each
  // once); the default is the reverse of the tensor order.
  void set_ready_order(std::vector<int> order);
  void set_random_start(RandomStartFn fn) { random_start_ = std::move(fn); }
  // Allocates the state for the workers this process holds ([first, first+resident)).
  void setup(int first, int resident);
  // out = the exchanged mean gradient of step `step` (1-based) from the
  // workers' rows `grads` (read only). Logs the step's allreduces.
  void exchange(Communicator& comm, const WorkerBuffers& grads, int64_t step,
                std::span<float> out);
  // The records of one step before and after the start (what cost prices).
  std::vector<CommRecord> vanilla_records(bool first_step) const;
  std::vector<CommRecord> compressed_records() const;
  static uint64_t planned_bytes(const PowerSgdOptions& opts, int resident, size_t dim,
                                const std::vector<TensorInfo>& tensors, int workers);
  size_t held_worker_bytes() const;
  void serialize(StateArchive& io);
  const std::vector<PowerSgdBucket>& buckets() const { return rebuilt_; }
  int64_t random_seed() const { return opts_.random_seed; }

 private:
  void plan_buckets();
  void compressed_step(Communicator& comm, const WorkerBuffers& grads,
                       const std::vector<PowerSgdBucket>& buckets, bool rebuilt,
                       std::span<float> out);
  void settle_bucket(Communicator& comm, int b, const PowerSgdBucket& bucket, bool rebuilt,
                     const WorkerBuffers& m, std::span<float> out);
  void start_q(const PowerSgdBucket& bucket, std::span<float> q);

  PowerSgdOptions opts_;
  int workers_;
  size_t dim_;
  std::vector<TensorInfo> tensors_;
  std::vector<int> ready_order_;
  std::vector<PowerSgdBucket> first_;    // step 1: one bucket, model order
  std::vector<PowerSgdBucket> rebuilt_;  // from step 2
  RandomStartFn random_start_;
  int first_worker_ = 0, resident_ = 0;
  // State between steps (the hook's error_dict, q_memory_dict, rng):
  std::vector<float> error_;                   // resident × dim: M of this step, then e
  std::vector<std::vector<float>> q_memory_;   // per rebuilt bucket, warm start only
  std::vector<uint8_t> has_memory_;            // per rebuilt bucket
  int64_t draws_ = 0;                          // random starts drawn so far
  // Scratch: the workers' P or Q rows; this bucket's P and Q; the mean.
  std::vector<float> rows_, p_, q_, mean_;
};

}  // namespace bitlab
