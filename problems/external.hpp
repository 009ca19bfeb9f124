// `external`: a problem whose gradients are computed outside bitlab and handed
// in step by step — the Python bridge (python/bitlab/torch.py,
// docs/python.md), where a torch.nn.Module's backward pass makes them. bitlab
// adds no arithmetic of its own here: each worker's gradient is copied, once,
// from the caller's buffers into the row the cluster folds or exchanges, and
// its loss is passed through as given.
//
// The bridge copies each gradient straight into the worker's row of the
// cluster (Cluster::grad(w), which the simulation keeps for a given problem:
// no streamed mean) and hands in pointers into that row; the step then only
// checks it. Pointers elsewhere are copied in the step instead.
//
// The options name the model's tensors (PyTorch's named parameters, in
// order, with their shapes), so that per-tensor rules (granularity "tensor",
// LAMB's trust ratios, LoCo's 2-D groups and its 1-D tensors sent whole)
// apply as on the built-in problems; config.json records them. `bitlab run`
// refuses the problem (it cannot compute the gradients) with a message that
// says where it runs; `validate`, `recost`, `report`, `plot` and `runs` read
// its folders as any other.
#pragma once

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "problems/problem.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

// One tensor of the model: its name and shape (PyTorch's, outermost first; an
// empty shape is a scalar).
struct ExternalTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool operator==(const ExternalTensor&) const = default;
};

template <>
struct JsonCodec<std::vector<ExternalTensor>> {
  static const char* type_name() { return "list of {\"name\": string, \"shape\": [int, ...]}"; }
  static std::vector<ExternalTensor> read(const Json& j, std::string_view path);
  static Json write(const std::vector<ExternalTensor>& v);
};

struct ExternalOptions {
  std::vector<ExternalTensor> tensors;
  static Schema<ExternalOptions> schema();
};

// The registry entry (problems/registry.cpp): resolves and describes the
// options; building it from a file is refused (see above).
RegistryEntry<Problem> external_entry();

class ExternalProblem final : public Problem {
 public:
  // `initial`: the model's parameters at the start, flat in tensor order
  // (init_params copies them; the seed plays no part).
  ExternalProblem(const ExternalOptions& options, int workers, std::vector<float> initial);

  size_t dim() const override { return dim_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return 0; }
  void init_params(std::span<float> x, uint64_t seed) const override;
  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& noise, Workspace& ws) const override;
  // Copies each worker's handed-in gradient into its row, tensor by tensor,
  // noting (never throwing: this runs on the cluster's threads) the first
  // element that is not finite; check_gradients() reports it.
  void loss_grad_workers(std::span<const float> x, std::span<WorkerBatch> workers,
                         Workspace& ws) const override;
  void check_gradients(int64_t step) const override;

  std::vector<std::string> eval_columns() const override { return eval_columns_; }
  void evaluate(std::span<const float> x, std::span<double> out) const override;

  // The caller's side, between steps (not thread-safe; the bridge calls them
  // from one thread). `data[k]` points at tensor k's gradient (numel floats,
  // contiguous) and must stay valid until the next step has run.
  // `loss`: nullopt when the caller was not told it (train_loss is then NaN).
  void set_gradients(int worker, std::vector<const float*> data, std::optional<double> loss);
  bool losses_measured() const override { return losses_measured_; }
  bool has_gradients(int worker) const { return !grads_[static_cast<size_t>(worker)].empty(); }
  // Forgets every handed-in gradient (after a step, or a failed one).
  void clear_gradients();
  // The evaluation hook: `columns` become metrics.csv's eval columns and
  // `fn` fills them at eval steps from the synchronised parameters.
  using Evaluator = std::function<void(std::span<const float> x, std::span<double> out)>;
  void set_evaluator(std::vector<std::string> columns, Evaluator fn);
  // Seconds spent in loss_grad_workers since the start (summed over the
  // threads): copying handed-in gradients, or only checking them when they
  // are already in their rows. What the bridge adds inside a step
  // (tests/bench/bench_bridge.py reports it).
  double copy_seconds() const { return static_cast<double>(copy_ns_.load()) * 1e-9; }

 private:
  struct Bad {
    std::atomic<int64_t> element{-1};  // flat index of the first non-finite value
  };
  std::vector<TensorInfo> tensors_;
  size_t dim_ = 0;
  std::vector<float> initial_;
  std::vector<std::vector<const float*>> grads_;  // per worker, per tensor
  std::vector<double> losses_;
  bool losses_measured_ = true;  // of the last step: every worker's loss was given
  mutable std::vector<Bad> bad_;  // per worker
  mutable std::atomic<int64_t> copy_ns_{0};
  std::vector<std::string> eval_columns_;
  Evaluator evaluator_;
};

}  // namespace bitlab
