// Options, data generation and reference solutions of the synthetic problems
// (quadratic, least squares, logistic regression, MLP). The problem classes
// themselves stay private to their .cpp files; this header exposes what tests
// and tools need to check them: the generated data and the reference optima.
//
// Every data set is a pure function of the options (data_seed included): it is
// drawn sequentially from RngStream(data_seed, Purpose::kData), so the data
// stay fixed when the run seed changes. Under a DataScope that does not
// evaluate (an MPI rank other than 0) only the workers' training rows keep
// their features (the stream is still drawn in full, so they are the same
// values) and no held-out set is drawn; a process that evaluates keeps every
// training row (train_loss_full and the reference optimum read them all).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "problems/problem.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

using RowMatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// One tensor of a layout: its name, size and 2-D shape (rows 0: 1-D; see
// TensorInfo).
struct TensorPart {
  std::string name;
  size_t size = 0;
  size_t rows = 0;
  size_t cols = 0;
};

// Consecutive tensors of the given parts, tiling [0, sum of sizes).
std::vector<TensorInfo> make_tensors(const std::vector<TensorPart>& parts);

// The shape of a problem laid out as `parts` (dim: their sizes' sum, checked
// by `blame`; tensors: make_tensors(parts) when asked).
ProblemShape shape_of_parts(const std::vector<TensorPart>& parts, size_t num_train, bool tensors,
                            const ParamBlame& blame);

// Samples of a data set: one row of `x` per sample held by this process
// (every sample, unless a DataScope restricted it; then `row_of` maps samples
// to rows). Labels and targets are kept for every sample (4 bytes each: the
// sharding needs the labels of all).
struct Samples {
  RowMatrixF x;
  Eigen::VectorXf target;       // regression targets (least squares); empty otherwise
  std::vector<int32_t> labels;  // class labels (classification); empty otherwise
  std::vector<int32_t> row_of;  // empty: row j of x is sample j; else sample -> row, -1 = not held

  size_t count() const { return row_of.empty() ? static_cast<size_t>(x.rows()) : row_of.size(); }
  bool holds_all() const { return row_of.empty(); }
  size_t held() const { return static_cast<size_t>(x.rows()); }
  // The features of `sample`, which this process must hold (a worker's batch
  // always is; std::logic_error otherwise).
  auto row(uint32_t sample) const { return x.row(row_index(sample)); }
  Eigen::Index row_index(uint32_t sample) const;
  // Row of `sample` in x, or −1 when this process does not hold it.
  int32_t held_row(uint32_t sample) const {
    return row_of.empty() ? static_cast<int32_t>(sample) : row_of[sample];
  }
  // Sizes x for the samples `keep` (sorted, distinct; nullopt: all `count`)
  // with `features` columns, and maps them (row_of); rows are left to fill.
  void allocate_rows(size_t count, Eigen::Index features,
                     const std::optional<std::vector<uint32_t>>& keep);
  // Keeps only the rows of `keep` (sorted, distinct samples); nullopt keeps all.
  void hold_only(const std::optional<std::vector<uint32_t>>& keep);
};

// Draws `count` samples of `features` columns in order from `rng`: draw(row,
// j) writes sample j's features into `row` and sets its label or target
// (s.labels / s.target, sized beforehand by the caller). Only the samples
// `held(s, count)` returns (nullopt = all; an empty function = all without asking)
// keep their features. `held` may read the labels, so the stream is then drawn
// twice from the same start: `rng` and every kept value end up exactly as if
// everything had been drawn once.
void draw_samples(
    Samples& s, Eigen::Index count, Eigen::Index features, RngStream& rng,
    const std::function<std::optional<std::vector<uint32_t>>(const Samples&, size_t count)>& held,
    const std::function<void(RngStream&, float* row, Eigen::Index j)>& draw);

// ---- quadratic -------------------------------------------------------------

struct QuadraticOptions {
  int64_t dim = 100;
  double condition_number = 10.0;
  double noise = 0.0;
  int64_t tensors = 1;
  uint64_t data_seed = 0;
  static Schema<QuadraticOptions> schema();
};

struct QuadraticData {
  std::vector<float> curvature;  // h_k = κ^(k/(d-1)), from 1 to κ
  std::vector<float> optimum;    // x* ~ N(0, 1)
};
QuadraticData make_quadratic_data(const QuadraticOptions& o);
RegistryEntry<Problem> quadratic_entry();

// ---- least squares ---------------------------------------------------------

struct LeastSquaresOptions {
  int64_t dim = 20;
  int64_t samples = 1024;
  int64_t test_samples = 256;
  double noise_std = 0.1;
  uint64_t data_seed = 0;
  static Schema<LeastSquaresOptions> schema();
};

struct LeastSquaresData {
  Samples train, test;
  std::vector<float> x_true;
};
LeastSquaresData make_least_squares_data(const LeastSquaresOptions& o, const DataScope& scope = {});
// Minimiser of (1/2m)‖Ax − b‖² over the training set, in double (normal
// equations, LDLT).
Eigen::VectorXd least_squares_solution(const Samples& train);
// (1/2m)‖Ax − b‖² in double.
double least_squares_objective(const Samples& s, const Eigen::VectorXd& x);
RegistryEntry<Problem> least_squares_entry();

// ---- logistic regression ---------------------------------------------------

struct LogisticOptions {
  int64_t dim = 20;
  int64_t samples = 2048;
  int64_t test_samples = 512;
  double l2 = 1e-3;
  double separation = 3.0;
  uint64_t data_seed = 0;
  static Schema<LogisticOptions> schema();
};

// The bias of the generating model: a fixed offset so that the bias parameter
// has something to learn and the classes are mildly unbalanced (about 55/45).
inline constexpr double kLogisticTrueBias = 0.5;

struct LogisticData {
  Samples train, test;
  std::vector<float> w_true;
};
LogisticData make_logistic_data(const LogisticOptions& o, const DataScope& scope = {});
// Mean cross-entropy over `s` plus (l2/2)‖w‖², in double; params = [w; b].
double logistic_objective(const Samples& s, const Eigen::VectorXd& params, double l2);
// Minimiser [w; b] of logistic_objective on `train` by damped Newton in
// double; nullopt when the gradient norm does not reach 1e-10 within 100
// iterations (separable data with l2 = 0 has no finite minimiser).
std::optional<Eigen::VectorXd> logistic_solution(const Samples& train, double l2);
RegistryEntry<Problem> logistic_entry();

// ---- MLP -------------------------------------------------------------------

struct MlpOptions {
  int64_t input_dim = 16;
  int64_t hidden = 32;
  int64_t classes = 4;
  std::string activation = "tanh";
  int64_t samples = 4096;
  int64_t test_samples = 1024;
  // Bayes (nearest-centre) test accuracy ≈ 0.90–0.97 over data seeds 0–2.
  double separation = 3.0;
  uint64_t data_seed = 0;
  static Schema<MlpOptions> schema();
};

struct MlpData {
  Samples train, test;
  RowMatrixF centres;  // classes × input_dim
};
MlpData make_mlp_data(const MlpOptions& o, const DataScope& scope = {});
RegistryEntry<Problem> mlp_entry();

}  // namespace bitlab
