// The problem interface: data, model, loss + gradient, evaluation and tensor
// boundaries. A problem is immutable after construction and `loss_grad` is
// called concurrently for different workers, each with its own Workspace.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/core/registry.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/tensor_layout.hpp"

namespace bitlab {

// Which training samples this process holds. The simulator holds every one.
// Under the MPI backend a rank holds only the samples of its own workers'
// shards (plus, on rank 0, what evaluation reads), so that a data set's memory
// divides over the ranks.
struct DataScope {
  // Given the training set's size, labels (empty for problems without labels)
  // and class count, returns the sorted, distinct indices of the samples this
  // process's workers draw from. Empty function: every sample.
  std::function<std::vector<uint32_t>(size_t num_train, std::span<const int32_t> labels,
                                      int classes)>
      worker_samples;
  // Whether this process evaluates (MPI rank 0; the simulator). The others
  // need neither held-out data nor the training samples only evaluation reads,
  // and must not call Problem::evaluate.
  bool evaluates = true;
  bool holds_all() const { return !worker_samples; }
};

// The training samples a problem must hold under `scope`: the workers'
// samples, plus the first `eval_prefix` samples when the process evaluates
// (sorted, distinct); nullopt when that is every sample.
std::optional<std::vector<uint32_t>> held_samples(const DataScope& scope, size_t num_train,
                                                  std::span<const int32_t> labels, int classes,
                                                  size_t eval_prefix);

class Problem;
template <>
struct MakeContext<Problem> {
  using type = DataScope;
};

// What a problem is, known from its options without building it: what
// `bitlab cost` prices (a d = 1e9 model is not allocated to be priced). Each
// problem has a static shape(const Options&, bool tensors) that its
// constructor's layout comes from too, so the two cannot drift (the
// `problems` suite compares them for every registered problem). Parameter
// counts are int64: a count that does not fit is a ConfigError naming the
// option that made it, never a wrapped number.
struct ProblemShape {
  size_t dim = 0;        // parameters d, as Problem::dim()
  size_t num_train = 0;  // as Problem::num_train()
  // As Problem::tensors(); filled only when asked (a quadratic may be split
  // into as many tensors as it has parameters).
  std::vector<TensorInfo> tensors;
};
template <>
struct ShapeOf<Problem> {
  using type = ProblemShape;
};

// Per-worker scratch memory a problem needs in loss_grad (grown on first use,
// then reused: no allocation in the step loop once batch sizes are fixed).
struct Workspace {
  virtual ~Workspace() = default;
};

// One worker's part of Problem::loss_grad_workers: its batch, where its
// gradient goes, its noise stream, and (written) its mean loss.
struct WorkerBatch {
  std::span<const uint32_t> batch;
  std::span<float> g;
  const RngStream* noise = nullptr;
  double loss = 0.0;
  int worker = -1;  // its index in the cluster (problems whose gradients come from outside read it)
};

class Problem {
 public:
  virtual ~Problem() = default;

  // Number of parameters d.
  virtual size_t dim() const = 0;
  // Tensor boundaries; they tile [0, dim()) in order, without gaps.
  virtual const std::vector<TensorInfo>& tensors() const = 0;

  // Training samples that can be sharded over workers; 0 for problems
  // without a data set (the quadratic), whose batches are empty.
  virtual size_t num_train() const = 0;
  // Class label of each training sample, for label-skewed sharding; empty for
  // regression problems.
  virtual std::span<const int32_t> train_labels() const { return {}; }
  virtual int num_classes() const { return 0; }

  // Initial parameters; random ones come from RngStream(seed, Purpose::kInit).
  virtual void init_params(std::span<float> x, uint64_t seed) const = 0;

  virtual std::unique_ptr<Workspace> make_workspace() const {
    return std::make_unique<Workspace>();
  }

  // Mean loss over the batch (indices into the training set) at x; writes the
  // gradient of that mean loss into g (overwritten, length dim()). `noise` is
  // this worker's stream for this step, for problems with synthetic gradient
  // noise. Must be thread-safe for distinct workspaces.
  virtual double loss_grad(std::span<const float> x, std::span<const uint32_t> batch,
                           std::span<float> g, const RngStream& noise, Workspace& ws) const = 0;

  // loss_grad for several workers at the same parameters x: each worker's
  // loss and gradient, bit for bit what loss_grad gives it alone, so the
  // bits do not depend on how the caller groups workers (thread count,
  // streamed blocks, MPI ranks). The default calls loss_grad per worker. The
  // real problems override it to run the forward and input-gradient products
  // over all the workers' samples at once (rows of a product are independent:
  // sim/kernels/matmul.hpp); only the weight gradients are per worker.
  virtual void loss_grad_workers(std::span<const float> x, std::span<WorkerBatch> workers,
                                 Workspace& ws) const {
    for (WorkerBatch& w : workers) w.loss = loss_grad(x, w.batch, w.g, *w.noise, ws);
  }
  // How many samples one loss_grad_workers call should cover for its products
  // to run near their best (more only grows the workspace and spills the
  // caches); the cluster groups workers up to it. 1: no gain from grouping.
  virtual size_t pass_samples() const { return 1; }
  // True for a problem whose gradients are made outside bitlab and handed in
  // one worker at a time (problems/external.hpp, the Python bridge): the
  // simulation then takes them through Simulation::take_gradient and never
  // calls loss_grad. Built-in problems compute their own.
  virtual bool gradients_handed_in() const { return false; }

  // Evaluation: named columns written to metrics.csv at eval steps.
  virtual std::vector<std::string> eval_columns() const = 0;
  virtual void evaluate(std::span<const float> x, std::span<double> out) const = 0;

  // Training samples whose features this process holds (num_train() unless
  // the DataScope restricted it); reported in summary.json under MPI.
  virtual size_t held_train_samples() const { return num_train(); }

  // Optimal value of the training objective when known (exactly or by a
  // reference solve); summary.json reports it.
  virtual std::optional<double> optimal_loss() const { return std::nullopt; }
};

const std::vector<RegistryEntry<Problem>>& problem_registry();

// The shape of a resolved problem section ({"name": ..., options}) through
// its registry entry's shape function, without building it. Throws
// ConfigError as building would for what the options alone decide (a
// parameter count over int64, a data set file that is missing).
ProblemShape problem_shape(const Json& resolved, bool tensors = false);

// Parameter counting that refuses rather than wraps: a product or sum that
// does not fit in int64 is a ConfigError blaming the option that made it
// ("problem.widths = [...]: makes more than 2^63 - 1 parameters").
struct ParamBlame {
  std::string field;  // "problem.widths"
  Json value;
  size_t product(size_t a, size_t b) const;
  size_t sum(size_t a, size_t b) const;
  [[noreturn]] void fail() const;
};

}  // namespace bitlab
