// `external`: a problem whose gradients are computed outside bitlab and handed
// in worker by worker: the Python bridge (python/bitlab/torch.py,
// docs/python.md), where a torch.nn.Module's backward pass makes them. The
// simulation takes each worker's gradient as its block ends
// (Simulation::take_gradient: into the mean's tree, the optimizer's worker
// stage, or the worker's row, read once and checked in the same pass), so no
// gradient is held beyond what `bitlab run` holds. This problem only names the
// model's tensors, holds its initial parameters and its evaluation hook.
//
// The options name the model's tensors (PyTorch's named parameters, in
// order, with their shapes), so that per-tensor rules (granularity "tensor",
// LAMB's trust ratios, LoCo's 2-D groups and its 1-D tensors sent whole)
// apply as on the built-in problems; config.json records them. `bitlab run`
// refuses the problem (it cannot compute the gradients) with a message that
// says where it runs; `validate`, `recost`, `report`, `plot` and `runs` read
// its folders as any other.
#pragma once

#include <functional>
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

// The registry entry (problems/problem_registry.cpp): resolves and describes the
// options; building it from a file is refused (see above).
RegistryEntry<Problem> external_entry();

class ExternalProblem final : public Problem {
 public:
  // `initial`: the model's parameters at the start, flat in tensor order
  // (init_params copies them; the seed plays no part).
  ExternalProblem(const ExternalOptions& options, std::vector<float> initial);

  size_t dim() const override { return dim_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return 0; }
  void init_params(std::span<float> x, uint64_t seed) const override;
  // Never called: the gradients are handed in (std::logic_error).
  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& noise, Workspace& ws) const override;
  bool gradients_handed_in() const override { return true; }

  std::vector<std::string> eval_columns() const override { return eval_columns_; }
  void evaluate(std::span<const float> x, std::span<double> out) const override;

  // The evaluation hook: `columns` become metrics.csv's eval columns and
  // `fn` fills them at eval steps from the synchronised parameters.
  using Evaluator = std::function<void(std::span<const float> x, std::span<double> out)>;
  void set_evaluator(std::vector<std::string> columns, Evaluator fn);

 private:
  std::vector<TensorInfo> tensors_;
  size_t dim_ = 0;
  std::vector<float> initial_;
  std::vector<std::string> eval_columns_;
  Evaluator evaluator_;
};

}  // namespace bitlab
