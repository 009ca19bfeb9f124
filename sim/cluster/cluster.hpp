// The simulated cluster: n data-parallel workers, each with its data shard,
// batch sampler, gradient buffer and (when an optimizer asks) its own copy of
// the parameters. Gradients of all workers are computed in parallel; each
// worker's result depends only on (seed, worker, step), never on scheduling.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "problems/problem.hpp"
#include "sim/comm/comm.hpp"
#include "sim/kernels/worker_intake.hpp"
#include "sim/core/function_ref.hpp"
#include "sim/core/schema.hpp"
#include "sim/core/state_archive.hpp"

namespace bitlab {

// Batch size per worker; `full` gives each worker its whole shard every step
// (deterministic, no sampling).
struct BatchSize {
  bool full = false;
  int64_t samples = 32;
  bool operator==(const BatchSize&) const = default;
};

template <>
struct JsonCodec<BatchSize> {
  static const char* type_name() { return "int or \"full\""; }
  static BatchSize read(const Json& j, std::string_view path);
  static Json write(const BatchSize& b);
};

struct ClusterOptions {
  int64_t workers = 1;
  BatchSize batch_size;
  std::string sharding = "iid";  // iid | contiguous | label_skew | replicated
  double dirichlet_alpha = 0.5;  // label_skew only: smaller = more skewed
  static Schema<ClusterOptions> schema();
};

// Epoch-wise sampling without replacement: the worker's batches, read in
// order, walk through a fresh permutation of its shard every epoch. The
// permutation of epoch e comes from RngStream(seed, kShuffle, worker, e).
class BatchSampler {
 public:
  BatchSampler() = default;
  BatchSampler(std::vector<uint32_t> shard, BatchSize batch, uint64_t seed, uint32_t worker);
  // Fills `out` with the batch of (1-based) step `step`.
  void sample(int64_t step, std::vector<uint32_t>& out);
  const std::vector<uint32_t>& shard() const { return shard_; }
  size_t batch_samples() const;

 private:
  void load_epoch(int64_t epoch);
  std::vector<uint32_t> shard_;
  BatchSize batch_;
  uint64_t seed_ = 0;
  uint32_t worker_ = 0;
  std::vector<uint32_t> perm_;
  int64_t perm_epoch_ = -1;
};

// Splits sample indices over workers. Throws ConfigError (naming
// cluster.<field>) when a worker would get no sample.
std::vector<std::vector<uint32_t>> make_shards(const Problem& problem, const ClusterOptions& opts,
                                               uint64_t seed);
// The same from the training set's size, labels and class count (what a
// problem knows before it has loaded its features: DataScope).
std::vector<std::vector<uint32_t>> make_shards(size_t num_train, std::span<const int32_t> labels,
                                               int classes, const ClusterOptions& opts,
                                               uint64_t seed);
// The sorted, distinct samples of the shards of workers `local` (the training
// rows a process computing those workers must hold).
std::vector<uint32_t> samples_of_workers(const std::vector<std::vector<uint32_t>>& shards,
                                         WorkerRange local);

// The streamed gradient mean (Cluster's third constructor argument): for
// optimizers that read the workers' gradients only through their mean (an
// exact allreduce in `wire`), each worker's gradient is folded into the fixed
// pairwise tree of mean_over_workers as soon as it is computed, so the n × d
// gradient matrix is never held (memory grows with log n, not n). The bits are
// mean_over_workers' over the rows, whatever the thread count. `fp32_too` also
// folds the fp32 mean (the grad_norm metric) when `wire` is not fp32.
// Under the MPI backend (`comm` distributed) a rank folds the tree's nodes
// that lie inside its block of workers (the largest such nodes, each cut
// further for the threads) and the nodes above them are combined across the
// ranks, each rank summing one element range of every such node in the same
// order (an alltoall of the node values, then an allgather of the mean): the
// simulator's bits, with no rank holding a gradient row per worker.
// Each thread computes up to `max_block_rows` gradients before it sums them:
// more rows mean fewer passes up the tree, fewer mean less memory; the bits
// do not depend on it. When the optimizer's state is larger than the threads'
// blocks (the 1-bit family's error rows at thousands of workers), the cluster
// halves the rows, to no fewer than kMinBlockRows, while the blocks exceed
// 1/kBlockStateShare of that state, so that the simulator adds little to
// what the algorithm itself must hold.
struct StreamedMean {
  WireDtype wire = WireDtype::kFp32;
  bool fp32_too = false;
  Communicator* comm = nullptr;  // the MPI backend's; null or one rank: the simulator
  int max_block_rows = 16;
  // The gradients are made outside bitlab and handed in one worker at a time
  // (the Python bridge): no blocks, no partial sums; each tree is a
  // WorkerTreeIntake (sim/kernels/worker_intake.hpp), which holds
  // ceil(log2 n) + 1 rows when the workers come in order.
  bool handed = false;
  static constexpr int kMinBlockRows = 4;
  static constexpr uint64_t kBlockStateShare = 32;
};

// Where a step's gradients go when they do not go to the mean: worker w's
// gradient as the cluster makes it, once per worker, in any order, distinct
// workers concurrently from the cluster's threads (the optimizer's
// take_gradient, optimizers/optimizer.hpp: 1-bit Adam's compressed momentum
// m_i = β1 m + (1−β1) g_i into the 1-bit allreduce's worker stage).
using TakeGradient = FunctionRef<void(int worker, std::span<const float> g)>;

class Cluster {
 public:
  // `local`: the workers this process computes (default: all, the
  // simulator). Under the MPI backend each rank keeps the data indices,
  // gradient and local-parameter buffers of its own block only (the
  // WorkerBuffers hold the local workers: first = local.begin), so per-rank
  // memory for them scales with workers/ranks.
  // `streamed`: deliver only the gradients' mean (StreamedMean); then
  // grads() is not available and compute_gradient_mean() replaces
  // compute_gradients(). Across ranks it needs `streamed->comm`, whose
  // local_workers() is `local` (every rank calls compute_gradient_mean at
  // the same step: it is a collective).
  // `optimizer_bytes`: what the optimizer's setup() will allocate
  // (Optimizer::planned_state_bytes), checked with the cluster's own buffers before
  // anything is allocated.
  Cluster(const ClusterOptions& opts, const Problem& problem, uint64_t seed,
          WorkerRange local = {}, std::optional<StreamedMean> streamed = std::nullopt,
          uint64_t optimizer_bytes = 0);
  ~Cluster();

  int workers() const { return workers_; }
  WorkerRange local_workers() const { return local_; }
  // Workers per node of the experiment's network (0: not modelled, every
  // worker on one node). Set by the simulation from the network topology
  // before the optimizer's setup; exchanges that run by node read it.
  void set_gpus_per_node(int g) { gpus_per_node_ = g; }
  int gpus_per_node() const { return gpus_per_node_; }
  size_t dim() const { return dim_; }
  // Bytes of the buffers every run holds: the local workers' gradient rows and
  // the parameters (checked against the machine's memory before allocating).
  uint64_t memory_lower_bound() const;
  // memory_lower_bound() plus the optimizer's state (the constructor's
  // optimizer_bytes): what the memory check compares with the machine.
  uint64_t memory_estimate() const;
  uint64_t optimizer_bytes() const { return optimizer_bytes_; }
  const Problem& problem() const { return problem_; }
  // The parameter vector's tensors (the problem's layout; may be empty).
  const std::vector<TensorInfo>& tensors() const { return problem_.tensors(); }
  // The run's seed: optimizers mix it into the streams of stochastic
  // compressors, so runs that differ only in their seed differ there too.
  uint64_t seed() const { return seed_; }

  // The synchronised parameters (what evaluation sees).
  std::span<float> params() { return {params_.data(), dim_}; }
  std::span<const float> params() const { return {params_.data(), dim_}; }
  // Per-worker copies for optimizers whose workers drift apart between
  // synchronisations (0/1 Adam's local steps). Initialised from params().
  void enable_local_params();
  bool has_local_params() const { return !local_params_.empty(); }
  // Worker i's parameters: its local copy if enabled, else the shared ones.
  std::span<float> params(int worker);
  WorkerBuffers local_params();

  // Gradients of the last compute_gradients(), one buffer per worker.
  // Throws std::logic_error on a streamed cluster (it holds no rows).
  WorkerBuffers grads() {
    if (stream_) throw_streamed("grads()");
    return {grads_.data(), stride_, dim_, workers_, local_.begin, local_.size()};
  }
  std::span<float> grad(int worker) { return grads()[worker]; }
  double loss(int worker) const { return losses_[worker]; }
  std::span<const double> losses() const { return losses_; }
  // Writable, for sharing the local workers' losses across ranks.
  std::span<double> losses() { return losses_; }

  // Every local worker: sample its batch for `step` and compute loss and gradient
  // at params(worker). Parallel over groups of workers (group_size), each group
  // one Problem::loss_grad_workers pass.
  void compute_gradients(int64_t step);

  // A streamed cluster: every worker's loss and gradient for `step`, folded
  // into the mean in the streamed wire (and, with `fp32_too` set and
  // `with_fp32`, also into the fp32 mean). Parallel over subtrees of the tree.
  // With `take` (the optimizer's begin_step said so), each gradient goes to
  // it instead, and only the fp32 mean (with_fp32) is folded.
  void compute_gradient_mean(int64_t step, bool with_fp32 = false,
                             const TakeGradient* take = nullptr);
  bool streams_mean() const { return stream_ != nullptr; }

  // A streamed cluster built with StreamedMean::handed (the gradients made
  // outside, the Python bridge): the same step in three calls.
  // begin_taking: a new step; `mean`: its gradients fold into the wire's mean
  // (false: the optimizer takes them, and only the fp32 mean is folded, when
  // `with_fp32`). take_into_mean: worker w's gradient into the step's means
  // (its pieces read once, checked in the same pass: false when an element
  // is not finite). finish_taken_mean: every local worker taken, the means
  // as compute_gradient_mean gives them (the same bits).
  void begin_taking(bool mean, bool with_fp32);
  bool take_into_mean(int worker, std::span<const RowPiece> pieces);
  void finish_taken_mean();
  bool takes_handed_gradients() const;
  // The mean of the last compute_gradient_mean() in `wire`: the streamed wire,
  // or fp32 when it was folded in that call. Throws std::logic_error otherwise.
  std::span<const float> streamed_mean(WireDtype wire) const;

  // Saves or loads the parameters and the workers' local copies (a
  // checkpoint). The batch samplers need nothing: each epoch's permutation is
  // drawn from (seed, worker, epoch), so step t's batch follows from t.
  void serialize(StateArchive& io);

  const std::vector<uint32_t>& shard(int worker) const { return samplers_[worker].shard(); }
  // Known for every worker (the time model prices all of them).
  size_t batch_samples(int worker) const { return batch_samples_[worker]; }
  // Stride between worker buffers (dim rounded up to 16 floats = 64 bytes).
  size_t stride() const { return stride_; }
  // Bytes this process holds in per-worker float buffers (gradients, local
  // parameters): local workers × stride × 4 each.
  // A streamed cluster counts its tree's blocks and partial sums here.
  size_t worker_buffer_bytes() const;

  // Workers whose gradients one Problem::loss_grad_workers call computes
  // when `count` workers are split over `threads` threads: enough for the
  // problem's pass_samples() (at batch_samples each), at most one thread's
  // share and at most kGroupWorkers. The bits do not depend on the grouping.
  static int group_size(int count, int threads, size_t batch_samples, size_t pass_samples);
  static constexpr int kGroupWorkers = 16;

 private:
  struct Stream;
  [[noreturn]] static void throw_streamed(const char* what);
  void fold_subtree(int lo, int hi, int level, int thread, float* const* outs, int64_t step);
  // The workers [lo, hi) of `rows` (stride_ apart) to the step's taker, if any.
  void hand_to_taker(int lo, int hi, const float* rows);
  void fill_gradient(int worker, int64_t step, std::span<float> g, Workspace& ws);
  // Workers [lo, hi) (at most kGroupWorkers), worker i's gradient into
  // rows + (i − lo)·stride_: one Problem::loss_grad_workers call when they
  // share the parameters, else fill_gradient each.
  void fill_gradients(int lo, int hi, int64_t step, float* rows, Workspace& ws);
  int group_size(int count, int threads) const;
  const Problem& problem_;
  int workers_;
  int gpus_per_node_ = 0;
  WorkerRange local_;
  size_t dim_;
  size_t stride_;
  uint64_t optimizer_bytes_ = 0;
  uint64_t seed_;
  std::vector<float> params_;
  std::vector<float> local_params_;
  std::vector<float> grads_;
  std::vector<double> losses_;
  std::vector<BatchSampler> samplers_;  // empty shards for non-local workers
  std::vector<size_t> batch_samples_;
  std::vector<std::vector<uint32_t>> batches_;
  std::vector<std::unique_ptr<Workspace>> workspaces_;  // per worker, or per thread if streamed
  std::unique_ptr<Stream> stream_;
};

}  // namespace bitlab
