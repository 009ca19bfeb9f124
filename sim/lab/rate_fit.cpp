// The exponent fit of the theory lab (sim/lab/rate.hpp): least squares of
// log(error) on the logs of the varied settings, per seed, and a Student
// t-interval over the seeds' slopes.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include "sim/lab/rate.hpp"

namespace bitlab {

std::vector<double> log_log_slopes(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& error) {
  const size_t n = error.size();
  const size_t k = n == 0 ? 0 : x.front().size();
  Eigen::MatrixXd a(n, k + 1);
  Eigen::VectorXd y(n);
  for (size_t i = 0; i < n; ++i) {
    a(static_cast<Eigen::Index>(i), 0) = 1.0;
    for (size_t j = 0; j < k; ++j) {
      a(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j + 1)) = std::log(x[i][j]);
    }
    y(static_cast<Eigen::Index>(i)) = std::log(error[i]);
  }
  const auto qr = a.colPivHouseholderQr();
  if (n < k + 1 || qr.rank() < static_cast<Eigen::Index>(k + 1)) {
    throw std::invalid_argument("the fit needs at least two distinct values on every axis");
  }
  const Eigen::VectorXd beta = qr.solve(y);
  return std::vector<double>(beta.data() + 1, beta.data() + beta.size());
}

double t_quantile_975(int df) {
  // Student's t, 0.975 quantile, df = 1..30; beyond, the normal 1.96 plus the
  // first term of the expansion in 1/df (error < 0.001 for df > 30).
  static const double kTable[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                                  2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                                  2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                                  2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return std::numeric_limits<double>::quiet_NaN();
  if (df <= 30) return kTable[df - 1];
  const double z = 1.959964;
  return z + (z * z * z + z) / (4.0 * df);
}

std::optional<double> expected_exponent(const std::string& path) {
  if (path == "steps" || path == "cluster.workers") return -0.5;
  return std::nullopt;
}

namespace {

// The slope per axis of each seed that has every grid point.
std::vector<std::vector<double>> per_seed_slopes(const std::vector<RateSample>& samples,
                                                 size_t grid_points) {
  std::map<int64_t, std::vector<const RateSample*>> by_seed;
  for (const auto& s : samples) by_seed[s.seed].push_back(&s);
  std::vector<std::vector<double>> slopes;
  for (const auto& [seed, list] : by_seed) {
    if (list.size() != grid_points) continue;  // a run of this seed did not finish
    std::vector<std::vector<double>> x;
    std::vector<double> e;
    for (const RateSample* s : list) {
      x.push_back(s->x);
      e.push_back(s->error);
    }
    slopes.push_back(log_log_slopes(x, e));
  }
  return slopes;
}

// The slopes of log(mean over seeds of the error) at each grid point.
std::vector<double> slopes_of_mean(const std::vector<RateSample>& samples) {
  std::map<std::vector<double>, std::pair<double, int>> by_point;  // sum, count
  for (const auto& s : samples) {
    auto& [sum, count] = by_point[s.x];
    sum += s.error;
    ++count;
  }
  std::vector<std::vector<double>> x;
  std::vector<double> e;
  for (const auto& [point, sc] : by_point) {
    x.push_back(point);
    e.push_back(sc.first / sc.second);
  }
  return log_log_slopes(x, e);
}

}  // namespace

RateFit fit_rate(const std::vector<std::string>& paths, const std::vector<RateSample>& samples) {
  std::map<std::vector<double>, int> points;
  for (const auto& s : samples) points[s.x] += 1;
  const auto slopes = per_seed_slopes(samples, points.size());
  const auto of_mean = slopes_of_mean(samples);
  RateFit fit;
  fit.seeds = static_cast<int>(slopes.size());
  fit.check = check_power_law(samples);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (size_t j = 0; j < paths.size(); ++j) {
    ExponentFit e;
    e.path = paths[j];
    e.expected = expected_exponent(paths[j]);
    e.exponent_of_mean = of_mean[j];
    double sum = 0, sq = 0;
    for (const auto& s : slopes) sum += s[j];
    const double k = static_cast<double>(slopes.size());
    e.exponent = slopes.empty() ? nan : sum / k;
    for (const auto& s : slopes) sq += (s[j] - e.exponent) * (s[j] - e.exponent);
    const double half =
        slopes.size() < 2 ? nan
                          : t_quantile_975(fit.seeds - 1) * std::sqrt(sq / (k - 1)) / std::sqrt(k);
    e.ci_low = e.exponent - half;
    e.ci_high = e.exponent + half;
    fit.exponents.push_back(e);
  }
  return fit;
}

}  // namespace bitlab
