// Whether the theory lab's error is a power law at all (sim/lab/rate.hpp:
// check_power_law): R² of the log-log fit, a lack-of-fit F-test against the
// seeds' spread, and the local exponents along each axis.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "sim/lab/rate.hpp"

namespace bitlab {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The continued fraction of the incomplete beta function (modified Lentz;
// Press et al., Numerical Recipes, 3rd ed., §6.4 "betacf").
double beta_continued_fraction(double a, double b, double x) {
  constexpr int kMaxIterations = 400;
  constexpr double kTolerance = 1e-15, kTiny = 1e-300;
  const auto guard = [](double v) { return std::fabs(v) < kTiny ? kTiny : v; };
  double c = 1.0, d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
  double h = d;
  for (int m = 1; m <= kMaxIterations; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2));
    d = 1.0 / guard(1.0 + aa * d);
    c = guard(1.0 + aa / c);
    h *= d * c;
    if (std::fabs(d * c - 1.0) < kTolerance) break;
  }
  return h;
}

// The regularized incomplete beta function I_x(a, b).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0.0) return 0.0;
  if (x >= 1.0) return 1.0;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  // The fraction converges fast below its mean; above it, by symmetry.
  if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_continued_fraction(a, b, x) / a;
  return 1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b;
}

// Least squares of y on [1, log x]: the coefficients and the residual sum of squares.
std::pair<Eigen::VectorXd, double> log_plane(const std::vector<std::vector<double>>& x,
                                             const std::vector<double>& y) {
  const auto n = static_cast<Eigen::Index>(y.size());
  const auto k = static_cast<Eigen::Index>(x.front().size());
  Eigen::MatrixXd a(n, k + 1);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    a(i, 0) = 1.0;
    for (Eigen::Index j = 0; j < k; ++j) a(i, j + 1) = std::log(x[i][j]);
    b(i) = y[i];
  }
  const Eigen::VectorXd beta = a.colPivHouseholderQr().solve(b);
  return {beta, (a * beta - b).squaredNorm()};
}

// Per axis: slopes of y between consecutive values of that axis, among points
// equal in the other axes, averaged over those groups position by position.
std::vector<std::vector<double>> local_slopes(const std::map<std::vector<double>, double>& y) {
  const size_t k = y.begin()->first.size();
  std::vector<std::vector<double>> out(k);
  for (size_t j = 0; j < k; ++j) {
    std::map<std::vector<double>, std::vector<std::pair<double, double>>> lines;
    for (const auto& [x, v] : y) {
      std::vector<double> rest = x;
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(j));
      lines[rest].emplace_back(x[j], v);  // the map's order: x[j] ascending
    }
    std::vector<double> sum;
    std::vector<int> count;
    for (const auto& [rest, line] : lines) {
      for (size_t q = 0; q + 1 < line.size(); ++q) {
        if (sum.size() <= q) sum.resize(q + 1, 0.0), count.resize(q + 1, 0);
        sum[q] += (line[q + 1].second - line[q].second) /
                  (std::log(line[q + 1].first) - std::log(line[q].first));
        ++count[q];
      }
    }
    for (size_t q = 0; q < sum.size(); ++q) out[j].push_back(sum[q] / count[q]);
  }
  return out;
}

}  // namespace

double f_upper_tail(double f, double d1, double d2) {
  if (!(f > 0.0)) return 1.0;
  return incomplete_beta(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * f));
}

PowerLawCheck check_power_law(const std::vector<RateSample>& samples) {
  PowerLawCheck c;
  std::map<std::vector<double>, std::vector<double>> logs;  // point -> log error per sample
  std::map<std::vector<double>, double> mean_error;
  for (const auto& s : samples) {
    logs[s.x].push_back(std::log(s.error));
    mean_error[s.x] += s.error;
  }
  std::map<std::vector<double>, double> log_mean;  // point -> log(seed-mean error)
  for (auto& [x, sum] : mean_error) log_mean[x] = std::log(sum / logs[x].size());
  std::vector<std::vector<double>> px;
  std::vector<double> py;
  for (const auto& [x, v] : log_mean) px.push_back(x), py.push_back(v);
  // R² of the seed-mean errors (the exponent_of_mean fit).
  const double mean_y = Eigen::Map<const Eigen::VectorXd>(py.data(), py.size()).mean();
  double total = 0.0;
  for (double v : py) total += (v - mean_y) * (v - mean_y);
  const double residual = log_plane(px, py).second;
  c.r2 = total > 0 ? 1.0 - residual / total : 1.0;
  // Lack of fit: every sample against the plane, split into the spread
  // between seeds at one point (pure error) and the points' distance from
  // the plane (lack of fit); F = (SS_lof / df_lof) / (SS_pe / df_pe).
  std::vector<std::vector<double>> sx;
  std::vector<double> sy;
  double pure = 0.0;
  for (const auto& [x, ys] : logs) {
    double m = 0.0;
    for (double v : ys) m += v;
    m /= static_cast<double>(ys.size());
    for (double v : ys) {
      sx.push_back(x), sy.push_back(v);
      pure += (v - m) * (v - m);
    }
  }
  const double df_lof = static_cast<double>(logs.size()) - static_cast<double>(px[0].size() + 1);
  const double df_pe = static_cast<double>(sy.size()) - static_cast<double>(logs.size());
  const double lack = std::max(0.0, log_plane(sx, sy).second - pure);
  if (df_lof <= 0 || df_pe <= 0) {
    c.lack_of_fit_p = kNaN;  // one seed (no spread to judge by) or as many points as parameters
  } else if (pure <= 1e-30 * (1.0 + lack)) {
    // Seeds that agree to rounding: any distance from the plane is real.
    c.lack_of_fit_p = lack > 1e-24 ? 0.0 : 1.0;
  } else {
    c.lack_of_fit_p = f_upper_tail((lack / df_lof) / (pure / df_pe), df_lof, df_pe);
  }
  c.local_slopes = local_slopes(log_mean);
  for (const auto& slopes : c.local_slopes) {
    if (slopes.empty()) continue;
    const auto [lo, hi] = std::minmax_element(slopes.begin(), slopes.end());
    c.slope_spread = std::max(c.slope_spread, *hi - *lo);
  }
  c.not_power_law = c.slope_spread > kMaxSlopeSpread &&
                    (std::isnan(c.lack_of_fit_p) || c.lack_of_fit_p < kLackOfFitAlpha);
  return c;
}

}  // namespace bitlab
