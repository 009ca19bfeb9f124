#include "problems/external.hpp"

#include <cstring>
#include <stdexcept>

namespace bitlab {

std::vector<ExternalTensor> JsonCodec<std::vector<ExternalTensor>>::read(const Json& j,
                                                                         std::string_view path) {
  if (!j.is_array() || j.empty()) {
    config_fail(path, j, "must be a non-empty list of {\"name\": string, \"shape\": [int, ...]}");
  }
  std::vector<ExternalTensor> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string at = join_path(path, std::to_string(i));
    const Json& t = j[i];
    if (!t.is_object() || !t.contains("name") || !t.contains("shape") || t.size() != 2) {
      config_fail(at, t, "must be {\"name\": string, \"shape\": [int, ...]} (both keys, no other)");
    }
    ExternalTensor e{JsonCodec<std::string>::read(t["name"], join_path(at, "name")),
                     JsonCodec<std::vector<int64_t>>::read(t["shape"], join_path(at, "shape"))};
    if (e.name.empty()) config_fail(join_path(at, "name"), t["name"], "must not be empty");
    for (const auto& seen : out) {
      if (seen.name == e.name) config_fail(join_path(at, "name"), t["name"], "names a tensor twice");
    }
    for (const int64_t s : e.shape) {
      if (s < 1 || s > (int64_t{1} << 40)) {
        config_fail(join_path(at, "shape"), t["shape"], "every size must be in [1, 2^40]");
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

Json JsonCodec<std::vector<ExternalTensor>>::write(const std::vector<ExternalTensor>& v) {
  Json out = Json::array();
  for (const auto& t : v) out.push_back({{"name", t.name}, {"shape", t.shape}});
  return out;
}

Schema<ExternalOptions> ExternalOptions::schema() {
  Schema<ExternalOptions> s;
  s.field("tensors", &ExternalOptions::tensors,
          "the model's parameters in order, as PyTorch names and shapes them (written by the "
          "Python bridge, bitlab.torch)");
  return s;
}

namespace {

// The model's tensors in order (PyTorch's shape[0] and shape[1]; TensorInfo:
// rows = 0 marks 1-D); a count over int64 blames the tensor's shape.
ProblemShape external_shape(const ExternalOptions& options, bool tensors) {
  ProblemShape out;
  for (size_t i = 0; i < options.tensors.size(); ++i) {
    const ExternalTensor& t = options.tensors[i];
    const ParamBlame blame{"problem.tensors." + std::to_string(i) + ".shape", Json(t.shape)};
    size_t n = 1;
    for (const int64_t s : t.shape) n = blame.product(n, static_cast<size_t>(s));
    if (tensors) {
      TensorInfo info{t.name, out.dim, n};
      if (t.shape.size() >= 2) {
        info.rows = static_cast<size_t>(t.shape[0]);
        info.cols = static_cast<size_t>(t.shape[1]);
      }
      out.tensors.push_back(std::move(info));
    }
    out.dim = blame.sum(out.dim, n);
  }
  return out;
}

// What `bitlab run` says of a config.json written by the bridge.
class RefusedExternal final : public Problem {
 public:
  explicit RefusedExternal(const ExternalOptions&) {
    throw ConfigError(
        "problem.name = \"external\": its gradients come from a PyTorch model through the "
        "Python bridge (bitlab.torch.Simulation, docs/python.md); `bitlab run` cannot compute "
        "them. recost, report, plot and runs read its results folder as any other",
        "problem.name");
  }
  size_t dim() const override { return 0; }
  const std::vector<TensorInfo>& tensors() const override { return none_; }
  size_t num_train() const override { return 0; }
  void init_params(std::span<float>, uint64_t) const override {}
  double loss_grad(std::span<const float>, std::span<const uint32_t>, std::span<float>,
                   const RngStream&, Workspace&) const override {
    return 0.0;
  }
  std::vector<std::string> eval_columns() const override { return {}; }
  void evaluate(std::span<const float>, std::span<double>) const override {}
  // Its gradients come from PyTorch, so it is never built: priced from its
  // tensor list.
  static ProblemShape shape(const ExternalOptions& o, bool tensors) {
    return external_shape(o, tensors);
  }

 private:
  std::vector<TensorInfo> none_;
};

}  // namespace

RegistryEntry<Problem> external_entry() {
  return make_registry_entry<Problem, RefusedExternal, ExternalOptions>(
      "external",
      "your own model: gradients handed in from PyTorch by the Python bridge (bitlab.torch; "
      "not runnable from the command line)");
}

ExternalProblem::ExternalProblem(const ExternalOptions& options, std::vector<float> initial)
    : initial_(std::move(initial)) {
  ProblemShape shape = external_shape(options, true);
  dim_ = shape.dim;
  tensors_ = std::move(shape.tensors);
  if (initial_.size() != dim_) {
    throw ConfigError("the initial parameters hold " + std::to_string(initial_.size()) +
                      " values; the tensors list " + std::to_string(dim_));
  }
}

void ExternalProblem::init_params(std::span<float> x, uint64_t /*seed*/) const {
  std::memcpy(x.data(), initial_.data(), dim_ * sizeof(float));
}

double ExternalProblem::loss_grad(std::span<const float>, std::span<const uint32_t>,
                                  std::span<float>, const RngStream&, Workspace&) const {
  // The simulation takes this problem's gradients as they are handed in
  // (gradients_handed_in); asking it to compute one is a bug.
  throw std::logic_error("ExternalProblem::loss_grad: its gradients are handed in "
                         "(Simulation::take_gradient)");
}

void ExternalProblem::evaluate(std::span<const float> x, std::span<double> out) const {
  if (evaluator_) evaluator_(x, out);
}

void ExternalProblem::set_evaluator(std::vector<std::string> columns, Evaluator fn) {
  eval_columns_ = std::move(columns);
  evaluator_ = std::move(fn);
}

}  // namespace bitlab
