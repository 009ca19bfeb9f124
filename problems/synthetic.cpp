#include "problems/synthetic.hpp"

#include <algorithm>
#include <cmath>

#include "sim/core/rng.hpp"

namespace bitlab {

std::vector<TensorInfo> make_tensors(const std::vector<TensorPart>& parts) {
  std::vector<TensorInfo> out;
  size_t offset = 0;
  for (const TensorPart& p : parts) {
    out.push_back({p.name, offset, p.size, p.rows, p.cols});
    offset += p.size;
  }
  return out;
}

ProblemShape shape_of_parts(const std::vector<TensorPart>& parts, size_t num_train, bool tensors,
                            const ParamBlame& blame) {
  ProblemShape out;
  for (const TensorPart& p : parts) out.dim = blame.sum(out.dim, p.size);
  out.num_train = num_train;
  if (tensors) out.tensors = make_tensors(parts);
  return out;
}

namespace {

// `row`: scale · N(0, 1) entries, drawn in order.
void fill_normal_row(RngStream& rng, float* row, Eigen::Index n, double scale = 1.0) {
  for (Eigen::Index k = 0; k < n; ++k) row[k] = static_cast<float>(scale * rng.next_normal());
}

std::vector<float> normal_vector(RngStream& rng, size_t n, double scale) {
  std::vector<float> v(n);
  fill_normal_row(rng, v.data(), static_cast<Eigen::Index>(n), scale);
  return v;
}

double sigmoid(double z) {
  // Written so that exp() never overflows.
  if (z >= 0) return 1.0 / (1.0 + std::exp(-z));
  const double e = std::exp(z);
  return e / (1.0 + e);
}

// log(1 + e^z) without overflow or cancellation.
double softplus(double z) {
  return std::max(z, 0.0) + std::log1p(std::exp(-std::abs(z)));
}

// Which training rows a synthetic problem keeps: all when this process
// evaluates (train_loss_full and the reference optimum read every row), else
// its workers' samples (see draw_samples).
std::function<std::optional<std::vector<uint32_t>>(const Samples&, size_t count)> synthetic_held(
    const DataScope& scope, int classes) {
  if (scope.holds_all() || scope.evaluates) return {};
  return [&scope, classes](const Samples& s, size_t count) {
    return held_samples(scope, count, s.labels, classes, 0);
  };
}

}  // namespace

// ---- quadratic -------------------------------------------------------------

QuadraticData make_quadratic_data(const QuadraticOptions& o) {
  const size_t d = static_cast<size_t>(o.dim);
  QuadraticData data;
  data.curvature.resize(d);
  for (size_t k = 0; k < d; ++k) {
    // pow(κ, 1.0) is exact, so h_max / h_min is exactly float(κ).
    const double t = d == 1 ? 0.0 : static_cast<double>(k) / static_cast<double>(d - 1);
    data.curvature[k] = static_cast<float>(std::pow(o.condition_number, t));
  }
  RngStream rng(o.data_seed, Purpose::kData);
  data.optimum = normal_vector(rng, d, 1.0);
  return data;
}

// ---- least squares ---------------------------------------------------------

LeastSquaresData make_least_squares_data(const LeastSquaresOptions& o, const DataScope& scope) {
  const Eigen::Index d = o.dim;
  RngStream rng(o.data_seed, Purpose::kData);
  LeastSquaresData data;
  data.x_true = normal_vector(rng, static_cast<size_t>(d), 1.0);
  const Eigen::Map<const Eigen::VectorXf> x_true(data.x_true.data(), d);
  auto generate = [&](Samples& s, int64_t count, const DataScope& set_scope) {
    s.target.resize(count);
    draw_samples(s, count, d, rng, synthetic_held(set_scope, 0),
                 [&](RngStream& r, float* row, Eigen::Index j) {
                   fill_normal_row(r, row, d);
                   const Eigen::Map<const Eigen::RowVectorXf> a(row, d);
                   const double clean = a.cast<double>().dot(x_true.cast<double>());
                   s.target(j) = static_cast<float>(clean + o.noise_std * r.next_normal());
                 });
  };
  generate(data.train, o.samples, scope);
  if (scope.evaluates) generate(data.test, o.test_samples, {});
  return data;
}

Eigen::VectorXd least_squares_solution(const Samples& train) {
  const Eigen::MatrixXd a = train.x.cast<double>();
  const Eigen::VectorXd b = train.target.cast<double>();
  const Eigen::MatrixXd ata = a.transpose() * a;
  return ata.ldlt().solve(a.transpose() * b);
}

double least_squares_objective(const Samples& s, const Eigen::VectorXd& x) {
  const Eigen::VectorXd r = s.x.cast<double>() * x - s.target.cast<double>();
  return 0.5 * r.squaredNorm() / static_cast<double>(s.count());
}

// ---- logistic regression ---------------------------------------------------

LogisticData make_logistic_data(const LogisticOptions& o, const DataScope& scope) {
  const Eigen::Index d = o.dim;
  RngStream rng(o.data_seed, Purpose::kData);
  LogisticData data;
  // ‖w_true‖ ≈ separation, so the margin w·x ~ N(0, separation²) whatever d.
  data.w_true = normal_vector(rng, static_cast<size_t>(d), o.separation / std::sqrt(double(d)));
  const Eigen::Map<const Eigen::VectorXf> w_true(data.w_true.data(), d);
  auto generate = [&](Samples& s, int64_t count, const DataScope& set_scope) {
    s.labels.resize(static_cast<size_t>(count));
    draw_samples(s, count, d, rng, synthetic_held(set_scope, 2),
                 [&](RngStream& r, float* row, Eigen::Index j) {
                   fill_normal_row(r, row, d);
                   const Eigen::Map<const Eigen::RowVectorXf> a(row, d);
                   const double z = a.cast<double>().dot(w_true.cast<double>()) + kLogisticTrueBias;
                   s.labels[static_cast<size_t>(j)] = r.next_uniform() < sigmoid(z) ? 1 : 0;
                 });
  };
  generate(data.train, o.samples, scope);
  if (scope.evaluates) generate(data.test, o.test_samples, {});
  return data;
}

double logistic_objective(const Samples& s, const Eigen::VectorXd& params, double l2) {
  const Eigen::Index d = s.x.cols();
  const Eigen::VectorXd z = s.x.cast<double>() * params.head(d);
  double loss = 0.0;
  for (Eigen::Index j = 0; j < z.size(); ++j) {
    const double zj = z(j) + params(d);
    loss += softplus(zj) - (s.labels[static_cast<size_t>(j)] ? zj : 0.0);
  }
  return loss / static_cast<double>(s.count()) + 0.5 * l2 * params.head(d).squaredNorm();
}

std::optional<Eigen::VectorXd> logistic_solution(const Samples& train, double l2) {
  const Eigen::Index n = train.x.rows(), d = train.x.cols();
  // Features with a column of ones for the bias.
  Eigen::MatrixXd a(n, d + 1);
  a.leftCols(d) = train.x.cast<double>();
  a.col(d).setOnes();
  Eigen::VectorXd y(n);
  for (Eigen::Index j = 0; j < n; ++j) y(j) = train.labels[static_cast<size_t>(j)];
  Eigen::VectorXd reg = Eigen::VectorXd::Constant(d + 1, l2);
  reg(d) = 0.0;  // the bias is not regularised

  Eigen::VectorXd p = Eigen::VectorXd::Zero(d + 1);
  double f = logistic_objective(train, p, l2);
  for (int iter = 0; iter < 100; ++iter) {
    const Eigen::VectorXd z = a * p;
    Eigen::VectorXd s(n), w(n);
    for (Eigen::Index j = 0; j < n; ++j) {
      s(j) = sigmoid(z(j));
      w(j) = s(j) * (1.0 - s(j));
    }
    const Eigen::VectorXd grad = a.transpose() * (s - y) / double(n) + reg.cwiseProduct(p);
    if (grad.norm() < 1e-10) return p;
    Eigen::MatrixXd h = a.transpose() * w.asDiagonal() * a / double(n);
    h.diagonal() += reg;
    const Eigen::LDLT<Eigen::MatrixXd> ldlt(h);
    if (ldlt.info() != Eigen::Success) return std::nullopt;
    const Eigen::VectorXd step = -ldlt.solve(grad);
    if (!step.allFinite()) return std::nullopt;  // singular Hessian: no unique optimum
    // Backtracking (Armijo) keeps Newton monotone far from the optimum. Near
    // it the decrease is below the rounding of f, hence the slack.
    const double slope = grad.dot(step), slack = 1e-14 * std::abs(f);
    double t = 1.0, f_new = logistic_objective(train, p + step, l2);
    while (f_new > f + 1e-4 * t * slope + slack && t > 1e-12) {
      t *= 0.5;
      f_new = logistic_objective(train, p + t * step, l2);
    }
    p += t * step;
    f = f_new;
  }
  return std::nullopt;
}

// ---- MLP -------------------------------------------------------------------

MlpData make_mlp_data(const MlpOptions& o, const DataScope& scope) {
  RngStream rng(o.data_seed, Purpose::kData);
  MlpData data;
  data.centres.resize(o.classes, o.input_dim);
  // ‖centre‖ ≈ separation whatever input_dim, so that the difficulty does not
  // change with the dimension (centres are about separation·√2 apart).
  const double scale = o.separation / std::sqrt(static_cast<double>(o.input_dim));
  for (Eigen::Index c = 0; c < o.classes; ++c)
    fill_normal_row(rng, data.centres.row(c).data(), o.input_dim, scale);
  auto generate = [&](Samples& s, int64_t count, const DataScope& set_scope) {
    s.labels.resize(static_cast<size_t>(count));
    draw_samples(s, count, o.input_dim, rng, synthetic_held(set_scope, int(o.classes)),
                 [&](RngStream& r, float* row, Eigen::Index j) {
                   const auto label =
                       static_cast<int32_t>(r.next_below(static_cast<uint64_t>(o.classes)));
                   s.labels[static_cast<size_t>(j)] = label;
                   fill_normal_row(r, row, o.input_dim);
                   Eigen::Map<Eigen::RowVectorXf>(row, o.input_dim) += data.centres.row(label);
                 });
  };
  generate(data.train, o.samples, scope);
  if (scope.evaluates) generate(data.test, o.test_samples, {});
  return data;
}

}  // namespace bitlab
