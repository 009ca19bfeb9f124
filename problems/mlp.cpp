// mlp: a two-layer perceptron classifier (input → hidden → classes, tanh or
// relu, softmax cross-entropy) on Gaussian clusters: the non-convex problem.
// Forward and backward passes are hand-written over the whole batch with Eigen
// matrix products; the finite-difference test in tests/test_problems.cpp
// checks the gradient.
//
// Parameters: [W1 (hidden × input_dim, row-major), b1 (hidden),
//              W2 (classes × hidden, row-major), b2 (classes)].
#include <algorithm>
#include <cmath>

#include "problems/synthetic.hpp"

namespace bitlab {

Schema<MlpOptions> MlpOptions::schema() {
  using O = MlpOptions;
  return Schema<O>()
      .field("input_dim", &O::input_dim, "number of input features", {rules::at_least<int64_t>(1)})
      .field("hidden", &O::hidden, "width of the hidden layer", {rules::at_least<int64_t>(1)})
      .field("classes", &O::classes, "number of classes = Gaussian clusters",
             {rules::at_least<int64_t>(2)})
      .field("activation", &O::activation, "hidden-layer activation",
             {rules::one_of({"tanh", "relu"})})
      .field("samples", &O::samples, "training samples (sharded over workers)",
             {rules::at_least<int64_t>(1)})
      .field("test_samples", &O::test_samples, "held-out samples for eval_loss and eval_accuracy",
             {rules::at_least<int64_t>(1)})
      .field("separation", &O::separation,
             "typical distance of a cluster centre from the origin (centres ~ N(0, "
             "separation²/input_dim · I), points = centre + N(0, I)): larger = easier",
             {rules::greater(0.0)})
      .field("data_seed", &O::data_seed,
             "seed of the data set (centres, points, labels); independent of the run seed");
}

namespace {

// Every temporary of a forward + backward pass; resized (not reallocated)
// when the batch size is unchanged.
struct MlpWorkspace final : Workspace {
  RowMatrixF rows;    // n × input_dim: the batch
  RowMatrixF pre;     // n × hidden: pre-activations
  RowMatrixF act;     // n × hidden: activations
  RowMatrixF logits;  // n × classes: logits, then dloss/dlogits
  RowMatrixF dpre;    // n × hidden: dloss/dpre
};

class Mlp final : public Problem {
 public:
  Mlp(const MlpOptions& o, const DataScope& scope)
      : in_(o.input_dim),
        hidden_(o.hidden),
        classes_(o.classes),
        relu_(o.activation == "relu"),
        data_(make_mlp_data(o, scope)),
        tensors_(shape(o, true).tensors) {}

  // fc1 (hidden × input_dim, bias), fc2 (classes × hidden, bias).
  static ProblemShape shape(const MlpOptions& o, bool tensors) {
    const auto in = static_cast<size_t>(o.input_dim), h = static_cast<size_t>(o.hidden),
               c = static_cast<size_t>(o.classes);
    const ParamBlame blame{"problem.hidden", Json(o.hidden)};
    return shape_of_parts({{"fc1.weight", blame.product(h, in), h, in},
                           {"fc1.bias", h},
                           {"fc2.weight", blame.product(c, h), c, h},
                           {"fc2.bias", c}},
                          static_cast<size_t>(o.samples), tensors, blame);
  }

  size_t dim() const override {
    const TensorInfo& last = tensors_.back();
    return last.offset + last.size;
  }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return data_.train.count(); }
  size_t held_train_samples() const override { return data_.train.held(); }
  std::span<const int32_t> train_labels() const override { return data_.train.labels; }
  int num_classes() const override { return static_cast<int>(classes_); }

  // LeCun initialisation: W ~ N(0, 1/fan_in), biases 0.
  void init_params(std::span<float> x, uint64_t seed) const override {
    std::fill(x.begin(), x.end(), 0.0f);
    RngStream rng(seed, Purpose::kInit);
    for (const size_t t : {size_t{0}, size_t{2}}) {
      const TensorInfo& w = tensors_[t];
      const double scale = 1.0 / std::sqrt(static_cast<double>(t == 0 ? in_ : hidden_));
      for (size_t i = 0; i < w.size; ++i) {
        x[w.offset + i] = static_cast<float>(scale * rng.next_normal());
      }
    }
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<MlpWorkspace>();
  }

  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& /*noise*/, Workspace& workspace) const override {
    auto& ws = static_cast<MlpWorkspace&>(workspace);
    const auto n = static_cast<Eigen::Index>(batch.size());
    if (n == 0) {
      std::fill(g.begin(), g.end(), 0.0f);
      return 0.0;
    }
    ws.rows.resize(n, in_);
    for (Eigen::Index r = 0; r < n; ++r) ws.rows.row(r) = data_.train.row(batch[r]);
    forward(x, ws.rows, ws);

    // Loss and dloss/dlogits = (softmax − onehot) / n, row by row.
    double loss = 0.0;
    const double inv_n = 1.0 / static_cast<double>(n);
    for (Eigen::Index r = 0; r < n; ++r) {
      const int32_t y = data_.train.labels[batch[r]];
      const double lse = log_sum_exp(ws.logits.row(r));
      loss += lse - ws.logits(r, y);
      for (Eigen::Index c = 0; c < classes_; ++c) {
        const double p = std::exp(static_cast<double>(ws.logits(r, c)) - lse);
        ws.logits(r, c) = static_cast<float>((p - (c == y ? 1.0 : 0.0)) * inv_n);
      }
    }
    const auto& dlogits = ws.logits;

    // Backward.
    const Params p = params(x);
    Grads gr = grads(g);
    gr.w2.noalias() = dlogits.transpose() * ws.act;
    gr.b2 = dlogits.colwise().sum().transpose();
    ws.dpre.noalias() = dlogits * p.w2;  // dloss/dact
    if (relu_) {
      ws.dpre.array() *= (ws.pre.array() > 0.0f).cast<float>();
    } else {
      ws.dpre.array() *= 1.0f - ws.act.array().square();
    }
    gr.w1.noalias() = ws.dpre.transpose() * ws.rows;
    gr.b1 = ws.dpre.colwise().sum().transpose();
    return loss * inv_n;
  }

  std::vector<std::string> eval_columns() const override {
    return {"eval_loss", "eval_accuracy", "train_loss_full"};
  }

  void evaluate(std::span<const float> x, std::span<double> out) const override {
    // Held-out loss and accuracy, and the loss on the whole training set (the
    // objective the optimizers minimise; noise-free, so runs can be compared).
    MlpWorkspace ws;
    const auto mean_loss = [&](const Samples& set, size_t* correct) {
      forward(x, set.x, ws);
      double loss = 0.0;
      for (Eigen::Index r = 0; r < ws.logits.rows(); ++r) {
        const int32_t y = set.labels[static_cast<size_t>(r)];
        loss += log_sum_exp(ws.logits.row(r)) - ws.logits(r, y);
        Eigen::Index best = 0;
        ws.logits.row(r).maxCoeff(&best);
        if (correct) *correct += best == y;
      }
      return loss / static_cast<double>(set.count());
    };
    const Samples& test = data_.test;
    size_t correct = 0;
    out[0] = mean_loss(test, &correct);
    out[2] = mean_loss(data_.train, nullptr);
    out[1] = static_cast<double>(correct) / static_cast<double>(test.count());
  }

 private:
  using MatMap = Eigen::Map<const RowMatrixF>;
  using VecMap = Eigen::Map<const Eigen::VectorXf>;
  struct Params {
    MatMap w1;
    VecMap b1;
    MatMap w2;
    VecMap b2;
  };
  struct Grads {
    Eigen::Map<RowMatrixF> w1;
    Eigen::Map<Eigen::VectorXf> b1;
    Eigen::Map<RowMatrixF> w2;
    Eigen::Map<Eigen::VectorXf> b2;
  };

  Params params(std::span<const float> x) const {
    const float* p = x.data();
    return {MatMap(p + tensors_[0].offset, hidden_, in_), VecMap(p + tensors_[1].offset, hidden_),
            MatMap(p + tensors_[2].offset, classes_, hidden_),
            VecMap(p + tensors_[3].offset, classes_)};
  }
  Grads grads(std::span<float> g) const {
    float* p = g.data();
    return {Eigen::Map<RowMatrixF>(p + tensors_[0].offset, hidden_, in_),
            Eigen::Map<Eigen::VectorXf>(p + tensors_[1].offset, hidden_),
            Eigen::Map<RowMatrixF>(p + tensors_[2].offset, classes_, hidden_),
            Eigen::Map<Eigen::VectorXf>(p + tensors_[3].offset, classes_)};
  }

  // Fills ws.pre, ws.act and ws.logits for the samples in `rows`.
  void forward(std::span<const float> x, const RowMatrixF& rows, MlpWorkspace& ws) const {
    const Params p = params(x);
    ws.pre.resize(rows.rows(), hidden_);
    ws.pre.noalias() = rows * p.w1.transpose();
    ws.pre.rowwise() += p.b1.transpose();
    ws.act.resize(rows.rows(), hidden_);
    if (relu_) {
      ws.act = ws.pre.cwiseMax(0.0f);
    } else {
      ws.act = ws.pre.array().tanh();
    }
    ws.logits.resize(rows.rows(), classes_);
    ws.logits.noalias() = ws.act * p.w2.transpose();
    ws.logits.rowwise() += p.b2.transpose();
  }

  // log Σ_c exp(logit_c) in double, shifted by the maximum so exp() cannot
  // overflow.
  template <class Row>
  static double log_sum_exp(const Row& logits) {
    const double m = logits.maxCoeff();
    double s = 0.0;
    for (Eigen::Index c = 0; c < logits.size(); ++c) s += std::exp(double(logits(c)) - m);
    return m + std::log(s);
  }

  Eigen::Index in_, hidden_, classes_;
  bool relu_;
  MlpData data_;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

RegistryEntry<Problem> mlp_entry() {
  return make_registry_entry<Problem, Mlp, MlpOptions>(
      "mlp",
      "two-layer MLP classifier (tanh or relu, softmax cross-entropy) on Gaussian clusters; "
      "non-convex");
}

}  // namespace bitlab
