// The theory lab (`bitlab rate`, docs/rate.md): runs an experiment over a grid
// of steps T, workers n (or any numeric setting) and seeds with the sweep
// machinery (sweep.hpp: run folders, progress, --resume), measures each run's
// error as the theorems state it (averaged over the last iterates), and fits
// log(error) against log(T), log(n), ... by least squares: the fitted
// exponents, with a confidence interval over seeds, beside the theorems'.
//
// The fit is a library of its own (fit_rate), so that tests/test_theory.cpp
// checks the papers' rates with the same code the command prints.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

// ---------------------------------------------------------------------------
// The fit

// One measured error: the varied values x (one per fitted axis, all > 0) of
// one run, its seed and its error (> 0).
struct RateSample {
  std::vector<double> x;
  int64_t seed = 0;
  double error = 0.0;
};

struct ExponentFit {
  std::string path;                    // "steps", "cluster.workers", ...
  double exponent = 0.0;               // mean over seeds of the per-seed slopes
  double ci_low = 0.0, ci_high = 0.0;  // 95 % Student t-interval (NaN with one seed)
  double exponent_of_mean = 0.0;       // slope of log(mean over seeds of the error)
  std::optional<double> expected;      // the theorem's exponent, when one is known
};

// Is the error a power law of the varied settings at all? A slope fitted to a
// curve that bends (a floor, a transient, a blow-up) is a number without a
// meaning; these say whether the fit describes the points (docs/rate.md).
struct PowerLawCheck {
  // R² of the log-log fit of the seed-mean errors (1: every point on the plane).
  double r2 = 0.0;
  // Lack-of-fit F-test (the grid points' seed-mean errors against the plane,
  // judged by the spread between seeds at each point): the chance that seed
  // noise alone leaves the points this far off. NaN with one seed.
  double lack_of_fit_p = 0.0;
  // Per axis, the local exponents: slopes of log(seed-mean error) between
  // consecutive values of that axis (averaged over the other axes' values).
  std::vector<std::vector<double>> local_slopes;
  // The largest max − min of one axis's local exponents.
  double slope_spread = 0.0;
  // The flag: the local exponents differ by more than kMaxSlopeSpread and seed
  // noise does not explain it (lack_of_fit_p < kLackOfFitAlpha; with one seed,
  // the spread alone decides).
  bool not_power_law = false;
};
// A local exponent that moves by more than this across the range makes one
// fitted exponent misstate the curve by more than ±0.125 at an end: larger
// than the differences the theorems' −1/2 is compared with (−1/4, −1).
inline constexpr double kMaxSlopeSpread = 0.25;
// A 1 % test: a power law measured with noisy seeds is flagged 1 time in 100.
inline constexpr double kLackOfFitAlpha = 0.01;

struct RateFit {
  std::vector<ExponentFit> exponents;  // one per axis, in order
  int seeds = 0;                       // seeds with every grid point (those fitted)
  PowerLawCheck check;
};

// The upper tail P(F > f) of Fisher's F with (d1, d2) degrees of freedom.
double f_upper_tail(double f, double d1, double d2);

// The goodness of fit of log(error) ~ plane in log(x) (see PowerLawCheck).
PowerLawCheck check_power_law(const std::vector<RateSample>& samples);

// Least-squares slopes of log(error) against log(x_0), log(x_1), ... (with an
// intercept). `x[i]` holds sample i's values. Throws std::invalid_argument
// when the design is singular (an axis with one value).
std::vector<double> log_log_slopes(const std::vector<std::vector<double>>& x,
                                   const std::vector<double>& error);

// The two-sided 95 % quantile of Student's t with `df` degrees of freedom.
double t_quantile_975(int df);

// Fits each seed's samples (a seed that lacks a grid point is left out) and
// returns the mean slope per axis with its 95 % t-interval over seeds, and the
// slope of the seed-mean error. `paths` names the axes; the expected exponent
// is the theorem's for "steps" and "cluster.workers" (−1/2 each).
RateFit fit_rate(const std::vector<std::string>& paths, const std::vector<RateSample>& samples);

// The theorems' exponent of the error in a varied setting: −1/2 in the steps T
// (the O(1/√T) rate), −1/2 in the workers n (linear speed-up, O(1/√(nT))).
std::optional<double> expected_exponent(const std::string& path);

// ---------------------------------------------------------------------------
// The lab

struct RateAxis {
  std::string path;
  std::vector<Json> values;
};

// Parses a --vary value "path=v1,v2,...". Throws ConfigError naming --vary,
// the value and the rule: no "=", an empty path, a value that is not a number
// or is <= 0 (its log is fitted), fewer than 3 distinct values.
RateAxis parse_vary(const std::string& text);

struct RateOptions {
  std::vector<RateAxis> axes;
  int seeds = 3;        // seeds 1..K
  std::string out_dir;  // "" : results/<stem>-rate
  int jobs = 0;
  bool resume = false;
  bool quiet = false;
  // --set path=value overrides of the experiment file (as bitlab run's).
  std::vector<std::string> sets;
  // "auto": suboptimality when the problem logs it (knows its optimum), else
  // grad_norm2; or one of those, or train_loss.
  std::string metric = "auto";
  double tail = 0.5;  // the error is the mean over the last `tail` of the steps
  // The learning rate of each run: "none" (the file's), "sqrt_n_over_T"
  // (lr = c·√(n/T), c = the file's lr, as 1-bit Adam's and 0/1 Adam's
  // theorems take it), "inv_sqrt_T" (lr = c/√T).
  std::string lr_scaling = "none";
  std::string binary = "/proc/self/exe";
};

// Runs the grid (one sweep, sweep.hpp), fits, prints the exponents on stdout
// and writes rate.json and rate.csv into the sweep folder. Returns 0, 3 (some
// run did not complete: fitted without it) or 128 + a signal (interrupted,
// nothing fitted). Throws ConfigError for bad input (exit 2).
int run_rate(const std::string& file, const RateOptions& options);

}  // namespace bitlab
