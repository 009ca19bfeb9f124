// least_squares: linear regression b ≈ A x with A ~ N(0, 1) entries and
// b = A x_true + noise. Loss on a batch B: (1/2|B|) Σ_{j∈B} (a_j·x − b_j)².
// Convex and smooth with a known optimum (solved in double), so
// suboptimality can be tracked exactly.
#include <algorithm>
#include <cmath>

#include "problems/synthetic.hpp"

namespace bitlab {

Schema<LeastSquaresOptions> LeastSquaresOptions::schema() {
  using O = LeastSquaresOptions;
  return Schema<O>()
      .field("dim", &O::dim, "number of features = parameters d", {rules::at_least<int64_t>(1)})
      .field("samples", &O::samples, "training rows of A (sharded over workers)",
             {rules::at_least<int64_t>(1)})
      .field("test_samples", &O::test_samples,
             "held-out rows, generated the same way, for eval_loss", {rules::at_least<int64_t>(1)})
      .field("noise_std", &O::noise_std, "standard deviation of the noise added to b = A x_true",
             {rules::at_least(0.0)})
      .field("data_seed", &O::data_seed,
             "seed of the data set (A, x_true, noise); independent of the run seed");
}

namespace {

struct LeastSquaresWorkspace final : Workspace {
  RowMatrixF rows;           // the batch's rows of A
  Eigen::VectorXf residual;  // A_B x − b_B
};

class LeastSquares final : public Problem {
 public:
  LeastSquares(const LeastSquaresOptions& o, const DataScope& scope)
      : data_(make_least_squares_data(o, scope)), tensors_(shape(o, true).tensors) {
    // O(m d² + d³) once; cheap at the sizes a simulation uses. Only the
    // process that evaluates (and so holds every row) needs it.
    if (scope.evaluates) {
      optimal_loss_ = least_squares_objective(data_.train, least_squares_solution(data_.train));
    }
  }

  // One weight row of d parameters (nn.Linear(d, 1) without bias).
  static ProblemShape shape(const LeastSquaresOptions& o, bool tensors) {
    const auto d = static_cast<size_t>(o.dim);
    return {d, static_cast<size_t>(o.samples),
            tensors ? make_tensors({{"weight", d, 1, d}}) : std::vector<TensorInfo>{}};
  }

  size_t dim() const override { return static_cast<size_t>(data_.train.x.cols()); }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return data_.train.count(); }
  size_t held_train_samples() const override { return data_.train.held(); }

  void init_params(std::span<float> x, uint64_t /*seed*/) const override {
    std::fill(x.begin(), x.end(), 0.0f);
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<LeastSquaresWorkspace>();
  }

  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& /*noise*/, Workspace& workspace) const override {
    auto& ws = static_cast<LeastSquaresWorkspace&>(workspace);
    const Eigen::Index n = static_cast<Eigen::Index>(batch.size()), d = data_.train.x.cols();
    Eigen::Map<Eigen::VectorXf> grad(g.data(), d);
    if (n == 0) {
      grad.setZero();
      return 0.0;
    }
    const Eigen::Map<const Eigen::VectorXf> params(x.data(), d);
    ws.rows.resize(n, d);  // no reallocation once the batch size is fixed
    ws.residual.resize(n);
    for (Eigen::Index r = 0; r < n; ++r) {
      ws.rows.row(r) = data_.train.row(batch[r]);
      ws.residual(r) = -data_.train.target(batch[r]);
    }
    ws.residual.noalias() += ws.rows * params;
    double loss = 0.0;
    for (Eigen::Index r = 0; r < n; ++r) loss += double(ws.residual(r)) * ws.residual(r);
    grad.noalias() = ws.rows.transpose() * ws.residual;
    grad *= 1.0f / static_cast<float>(n);
    return 0.5 * loss / static_cast<double>(n);
  }

  std::vector<std::string> eval_columns() const override {
    return {"eval_loss", "train_loss_full", "suboptimality"};
  }

  void evaluate(std::span<const float> x, std::span<double> out) const override {
    const Eigen::VectorXd params =
        Eigen::Map<const Eigen::VectorXf>(x.data(), static_cast<Eigen::Index>(x.size()))
            .cast<double>();
    out[0] = least_squares_objective(data_.test, params);
    out[1] = least_squares_objective(data_.train, params);
    out[2] = out[1] - optimal_loss_;
  }

  std::optional<double> optimal_loss() const override { return optimal_loss_; }

 private:
  LeastSquaresData data_;
  std::vector<TensorInfo> tensors_;
  double optimal_loss_ = 0.0;
};

}  // namespace

RegistryEntry<Problem> least_squares_entry() {
  return make_registry_entry<Problem, LeastSquares, LeastSquaresOptions>(
      "least_squares",
      "linear least squares (1/2m)‖Ax−b‖² on Gaussian data with label noise; knows its optimum");
}

}  // namespace bitlab
