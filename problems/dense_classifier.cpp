// softmax_regression and deep_mlp: fully connected classifiers on the real data
// sets (problems/datasets.hpp) with softmax cross-entropy. Softmax regression
// is the MLP without hidden layers (convex); deep_mlp has any number of hidden
// layers (`widths`) with relu, tanh or gelu.
//
// Forward and backward are hand-written over the whole batch with the
// deterministic products of sim/kernels/matmul.hpp (the cost of a step). Several
// workers' batches go through one pass (ClassifierProblem::loss_grad_workers):
// the forward and input-gradient products run over all their samples, the
// weight and bias gradients over each worker's rows. The finite-difference
// test in tests/test_real_problems.cpp checks the gradient.
//
// Parameters, layer l = 1..L (L = hidden layers + 1):
//   [W_l (out_l × in_l, row-major), b_l (out_l)] for l = 1..L, tensors
//   "fc<l>.weight", "fc<l>.bias".
// Forward:  a_0 = X;  z_l = a_{l−1} W_lᵀ + b_l;  a_l = act(z_l) (l < L);  logits = z_L.
// Backward: δ_L = dloss/dlogits;  ∇W_l = δ_lᵀ a_{l−1};  ∇b_l = Σ_rows δ_l;
//           δ_{l−1} = (δ_l W_l) ⊙ act'(z_{l−1}).
// gelu is the exact one, z·Φ(z) (PyTorch's default), not the tanh approximation.
#include <cmath>

#include "problems/classifier.hpp"
#include "problems/real_problems.hpp"
#include "sim/kernels/activations.hpp"
#include "sim/kernels/det_math.hpp"
#include "sim/kernels/matmul.hpp"

namespace bitlab {

Schema<SoftmaxRegressionOptions> SoftmaxRegressionOptions::schema() {
  Schema<SoftmaxRegressionOptions> s;
  return add_dataset_fields(s, {"digits", "breast_cancer", "wine", "fashion_mnist"});
}

Schema<DeepMlpOptions> DeepMlpOptions::schema() {
  using O = DeepMlpOptions;
  Schema<O> s;
  add_dataset_fields(s, {"digits", "breast_cancer", "wine", "fashion_mnist"})
      .field("widths", &O::widths, "widths of the hidden layers, input side first",
             {Rule<std::vector<int64_t>>{
                 [](const std::vector<int64_t>& w) {
                   return !w.empty() && std::ranges::all_of(w, [](int64_t v) { return v >= 1; });
                 },
                 "must be a non-empty list of widths >= 1 (softmax_regression has none)"}})
      .field("activation", &O::activation, "hidden-layer activation (gelu: exact, z·Φ(z))",
             {rules::one_of({"relu", "tanh", "gelu"})});
  return s;
}

namespace {

enum class Activation { kRelu, kTanh, kGelu };

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "tanh") return Activation::kTanh;
  return Activation::kGelu;
}

struct DenseWorkspace final : ClassifierWorkspace {
  std::vector<RowMatrixF> pre;  // z_l, l = 1..L−1 (index l−1)
  std::vector<RowMatrixF> act;  // a_l, l = 1..L−1 (index l−1)
  RowMatrixF delta, next;       // δ_l while going back (logits: z_L, then δ_L)
};

class DenseClassifier final : public ClassifierProblem {
 public:
  DenseClassifier(const DatasetOptions& data, const DataScope& scope,
                  const std::vector<int64_t>& widths, const std::string& activation)
      : ClassifierProblem(data, scope), activation_(parse_activation(activation)) {
    sizes_ = layer_sizes(data_.train.x.cols(), widths, data_.classes);
    tensors_ = make_tensors(parts(sizes_, widths));
  }
  DenseClassifier(const SoftmaxRegressionOptions& o, const DataScope& scope)
      : DenseClassifier(o, scope, {}, "relu") {}
  DenseClassifier(const DeepMlpOptions& o, const DataScope& scope)
      : DenseClassifier(o, scope, o.widths, o.activation) {}

  static ProblemShape shape(const SoftmaxRegressionOptions& o, bool tensors) {
    return shape(o, {}, tensors);
  }
  static ProblemShape shape(const DeepMlpOptions& o, bool tensors) {
    return shape(o, o.widths, tensors);
  }

  size_t dim() const override { return tensors_.back().offset + tensors_.back().size; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // Weights N(0, gain/fan_in): gain 2 (He) before a relu, 1 (LeCun) otherwise;
  // biases 0.
  void init_params(std::span<float> x, uint64_t seed) const override {
    std::fill(x.begin(), x.end(), 0.0f);
    RngStream rng(seed, Purpose::kInit);
    for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
      const TensorInfo& w = tensors_[2 * l];
      const bool relu_next = activation_ == Activation::kRelu && l + 2 < sizes_.size();
      fill_fan_in_normal(x.subspan(w.offset, w.size), size_t(sizes_[l]), relu_next ? 2.0 : 1.0,
                         rng);
    }
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<DenseWorkspace>();
  }

  void backward(std::span<const float> x, std::span<const WorkerRows> workers,
                Workspace& workspace) const override {
    auto& ws = static_cast<DenseWorkspace&>(workspace);
    ws.delta.swap(ws.logits);
    const size_t layers = sizes_.size() - 1;
    for (size_t l = layers; l >= 1; --l) {
      const RowMatrixF& input = l == 1 ? ws.rows : ws.act[l - 2];
      worker_layer_grads(workers, ws.delta, input, 1, tensors_[2 * (l - 1)].offset,
                         tensors_[2 * l - 1].offset);
      if (l == 1) break;
      ws.next.resize(ws.delta.rows(), sizes_[l - 1]);
      matmul_nn(ws.delta, weight(x, l), ws.next);
      apply_activation_grad(ws.pre[l - 2], ws.act[l - 2], ws.next);
      ws.delta.swap(ws.next);
    }
  }

 protected:
  void forward_logits(std::span<const float> x, const RowMatrixF& rows, Workspace& workspace,
                      RowMatrixF& logits) const override {
    auto& ws = static_cast<DenseWorkspace&>(workspace);
    const size_t layers = sizes_.size() - 1;
    ws.pre.resize(layers - 1);
    ws.act.resize(layers - 1);
    const RowMatrixF* input = &rows;
    for (size_t l = 1; l <= layers; ++l) {
      RowMatrixF& z = l == layers ? logits : ws.pre[l - 1];
      z.resize(rows.rows(), sizes_[l]);
      matmul_nt(*input, weight(x, l), z, ws.packed);
      add_to_rows(z, bias(x, l).data());
      if (l == layers) break;
      apply_activation(z, ws.act[l - 1]);
      input = &ws.act[l - 1];
    }
  }

 private:
  using ConstMat = Eigen::Map<const RowMatrixF>;
  using ConstVec = Eigen::Map<const Eigen::VectorXf>;

  ConstMat weight(std::span<const float> x, size_t l) const {
    return ConstMat(x.data() + tensors_[2 * (l - 1)].offset, sizes_[l], sizes_[l - 1]);
  }
  ConstVec bias(std::span<const float> x, size_t l) const {
    return ConstVec(x.data() + tensors_[2 * l - 1].offset, sizes_[l]);
  }
  // a = act(z), element by element with one function each, so that an
  // element's value does not depend on its position in the matrix (Eigen's
  // vectorised tanh is a different approximation from its scalar tail, and
  // which elements fall in the tail depends on the row count and alignment:
  // the batch of one worker or of several would round differently). tanh is
  // sim/kernels/activations.hpp's; gelu's erf is the C library's (glibc's erf
  // calls its exp, which is chosen by CPU: a last-bit caveat the other
  // activations do not have).
  void apply_activation(const RowMatrixF& z, RowMatrixF& a) const {
    a.resize(z.rows(), z.cols());
    const float* in = z.data();
    float* out = a.data();
    const Eigen::Index size = z.size();
    switch (activation_) {
      case Activation::kRelu:
        for (Eigen::Index i = 0; i < size; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
        break;
      case Activation::kTanh:
        tanh_array(in, out, static_cast<size_t>(size));
        break;
      case Activation::kGelu:
        for (Eigen::Index i = 0; i < size; ++i) {
          const double v = in[i];
          out[i] = static_cast<float>(v * 0.5 * (1.0 + std::erf(v * M_SQRT1_2)));
        }
        break;
    }
  }

  // d ⊙= act'(z) (a = act(z) is at hand for tanh), element by element.
  void apply_activation_grad(const RowMatrixF& z, const RowMatrixF& a, RowMatrixF& d) const {
    const float* zp = z.data();
    const float* ap = a.data();
    float* dp = d.data();
    const Eigen::Index size = z.size();
    switch (activation_) {
      case Activation::kRelu:
        for (Eigen::Index i = 0; i < size; ++i) dp[i] = zp[i] > 0.0f ? dp[i] : 0.0f * dp[i];
        break;
      case Activation::kTanh:
        for (Eigen::Index i = 0; i < size; ++i) dp[i] *= 1.0f - ap[i] * ap[i];
        break;
      case Activation::kGelu:
        // d/dz z·Φ(z) = Φ(z) + z·φ(z).
        for (Eigen::Index i = 0; i < size; ++i) {
          const double v = zp[i];
          const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
          const double pdf = det_math::exp(-0.5 * v * v) * 0.5 * M_2_SQRTPI * M_SQRT1_2;
          dp[i] = static_cast<float>(dp[i] * (cdf + v * pdf));
        }
        break;
    }
  }

  static std::vector<Eigen::Index> layer_sizes(Eigen::Index features,
                                               const std::vector<int64_t>& widths,
                                               Eigen::Index classes) {
    std::vector<Eigen::Index> sizes = {features};
    for (const int64_t w : widths) sizes.push_back(w);
    sizes.push_back(classes);
    return sizes;
  }

  // [W_l (out × in), b_l] per layer; a count over int64 blames the widths.
  static std::vector<TensorPart> parts(const std::vector<Eigen::Index>& sizes,
                                       const std::vector<int64_t>& widths) {
    const ParamBlame blame{"problem.widths", Json(widths)};
    std::vector<TensorPart> out;
    for (size_t l = 1; l < sizes.size(); ++l) {
      const std::string name = "fc" + std::to_string(l);
      const auto rows = size_t(sizes[l]), cols = size_t(sizes[l - 1]);
      out.push_back({name + ".weight", blame.product(rows, cols), rows, cols});
      out.push_back({name + ".bias", rows});
    }
    return out;
  }

  static ProblemShape shape(const DatasetOptions& o, const std::vector<int64_t>& widths,
                            bool tensors) {
    const DatasetSize data = dataset_size(o);
    return shape_of_parts(parts(layer_sizes(data.features, widths, data.classes), widths),
                          data.train, tensors, {"problem.widths", Json(widths)});
  }

  Activation activation_;
  std::vector<Eigen::Index> sizes_;  // input, hidden widths..., classes
  std::vector<TensorInfo> tensors_;
};

}  // namespace

RegistryEntry<Problem> softmax_regression_entry() {
  return make_registry_entry<Problem, DenseClassifier, SoftmaxRegressionOptions>(
      "softmax_regression",
      "multinomial logistic regression on a real data set (digits, breast_cancer, wine, "
      "fashion_mnist); convex");
}

RegistryEntry<Problem> deep_mlp_entry() {
  return make_registry_entry<Problem, DenseClassifier, DeepMlpOptions>(
      "deep_mlp",
      "MLP classifier with any hidden widths (relu, tanh, gelu) on a real data set; non-convex");
}

}  // namespace bitlab
