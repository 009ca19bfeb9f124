// logistic: binary logistic regression with a bias and L2 regularisation,
//   f(w, b) = mean_j [log(1 + e^{z_j}) − y_j z_j] + (λ/2)‖w‖²,  z_j = w·x_j + b,
// on Gaussian features with labels drawn from a logistic model (w_true,
// kLogisticTrueBias). Strongly convex for λ > 0; the optimum comes from a
// Newton solve in double.
#include <algorithm>
#include <cmath>

#include "problems/synthetic.hpp"

namespace bitlab {

Schema<LogisticOptions> LogisticOptions::schema() {
  using O = LogisticOptions;
  return Schema<O>()
      .field("dim", &O::dim, "number of features d (parameters: d weights + 1 bias)",
             {rules::at_least<int64_t>(1)})
      .field("samples", &O::samples, "training samples (sharded over workers)",
             {rules::at_least<int64_t>(1)})
      .field("test_samples", &O::test_samples, "held-out samples for eval_loss and eval_accuracy",
             {rules::at_least<int64_t>(1)})
      .field("l2", &O::l2, "λ of the regulariser (λ/2)‖w‖² (the bias is not regularised)",
             {rules::at_least(0.0)})
      .field("separation", &O::separation,
             "‖w_true‖ of the generating model (w_true ~ N(0, separation²/d)): larger = "
             "cleaner labels",
             {rules::greater(0.0)})
      .field("data_seed", &O::data_seed,
             "seed of the data set (features, w_true, labels); independent of the run seed");
}

namespace {

struct LogisticWorkspace final : Workspace {
  RowMatrixF rows;    // the batch's features
  Eigen::VectorXf z;  // logits, then dloss/dz
};

class Logistic final : public Problem {
 public:
  Logistic(const LogisticOptions& o, const DataScope& scope)
      : l2_(o.l2), data_(make_logistic_data(o, scope)), tensors_(shape(o, true).tensors) {
    // Only the process that evaluates (and so holds every row) needs it.
    if (!scope.evaluates) return;
    if (const auto p = logistic_solution(data_.train, l2_)) {
      optimal_loss_ = logistic_objective(data_.train, *p, l2_);
    }
  }

  // nn.Linear(d, 1): d weights and a bias.
  static ProblemShape shape(const LogisticOptions& o, bool tensors) {
    const auto d = static_cast<size_t>(o.dim);
    return shape_of_parts({{"weight", d, 1, d}, {"bias", 1}}, static_cast<size_t>(o.samples),
                          tensors, {"problem.dim", Json(o.dim)});
  }

  size_t dim() const override { return static_cast<size_t>(data_.train.x.cols()) + 1; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return data_.train.count(); }
  size_t held_train_samples() const override { return data_.train.held(); }
  std::span<const int32_t> train_labels() const override { return data_.train.labels; }
  int num_classes() const override { return 2; }

  void init_params(std::span<float> x, uint64_t /*seed*/) const override {
    std::fill(x.begin(), x.end(), 0.0f);
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<LogisticWorkspace>();
  }

  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& /*noise*/, Workspace& workspace) const override {
    auto& ws = static_cast<LogisticWorkspace&>(workspace);
    const Eigen::Index n = static_cast<Eigen::Index>(batch.size()), d = data_.train.x.cols();
    const Eigen::Map<const Eigen::VectorXf> w(x.data(), d);
    const float b = x[static_cast<size_t>(d)];
    Eigen::Map<Eigen::VectorXf> grad_w(g.data(), d);
    const double reg = 0.5 * l2_ * w.cast<double>().squaredNorm();
    if (n == 0) {
      grad_w = static_cast<float>(l2_) * w;
      g[static_cast<size_t>(d)] = 0.0f;
      return reg;
    }
    ws.rows.resize(n, d);  // no reallocation once the batch size is fixed
    for (Eigen::Index r = 0; r < n; ++r) ws.rows.row(r) = data_.train.row(batch[r]);
    ws.z.resize(n);
    ws.z.noalias() = ws.rows * w;
    double loss = 0.0, grad_b = 0.0;
    const float inv_n = 1.0f / static_cast<float>(n);
    for (Eigen::Index r = 0; r < n; ++r) {
      const double z = static_cast<double>(ws.z(r)) + b;
      const bool y = data_.train.labels[batch[r]] != 0;
      // log(1 + e^z) − y z, stable for any z; its derivative is σ(z) − y.
      const double e = std::exp(-std::abs(z));
      loss += std::max(z, 0.0) + std::log1p(e) - (y ? z : 0.0);
      const double sigma = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
      const double dz = sigma - (y ? 1.0 : 0.0);
      grad_b += dz;
      ws.z(r) = static_cast<float>(dz) * inv_n;
    }
    grad_w.noalias() = ws.rows.transpose() * ws.z;
    grad_w += static_cast<float>(l2_) * w;
    g[static_cast<size_t>(d)] = static_cast<float>(grad_b / static_cast<double>(n));
    return loss / static_cast<double>(n) + reg;
  }

  std::vector<std::string> eval_columns() const override {
    return {"eval_loss", "eval_accuracy", "train_loss_full", "suboptimality"};
  }

  void evaluate(std::span<const float> x, std::span<double> out) const override {
    const Eigen::VectorXd params =
        Eigen::Map<const Eigen::VectorXf>(x.data(), static_cast<Eigen::Index>(x.size()))
            .cast<double>();
    const Samples& test = data_.test;
    const Eigen::Index d = test.x.cols();
    const Eigen::VectorXd z = test.x.cast<double>() * params.head(d);
    size_t correct = 0;
    for (Eigen::Index j = 0; j < z.size(); ++j) {
      // Ties (z = 0) count as class 1, as σ(0) = ½ would round.
      correct += ((z(j) + params(d) >= 0.0) == (test.labels[static_cast<size_t>(j)] != 0));
    }
    out[0] = logistic_objective(test, params, 0.0);
    out[1] = static_cast<double>(correct) / static_cast<double>(test.count());
    out[2] = logistic_objective(data_.train, params, l2_);
    out[3] = optimal_loss_ ? out[2] - *optimal_loss_ : std::nan("");
  }

  std::optional<double> optimal_loss() const override { return optimal_loss_; }

 private:
  double l2_;
  LogisticData data_;
  std::vector<TensorInfo> tensors_;
  std::optional<double> optimal_loss_;
};

}  // namespace

RegistryEntry<Problem> logistic_entry() {
  return make_registry_entry<Problem, Logistic, LogisticOptions>(
      "logistic",
      "binary logistic regression with bias and L2 (λ/2)‖w‖² on Gaussian features; knows its "
      "optimum (Newton solve)");
}

}  // namespace bitlab
