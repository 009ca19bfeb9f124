// `bitlab rate`'s goodness of fit (sim/lab/rate.hpp: check_power_law): a true
// power law passes, a planted curve that is not one (a floor under 1/T, a
// blow-up) is flagged, and the F tail behind the lack-of-fit test matches
// the tables. Deterministic: the seed noise comes from a fixed generator.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "sim/lab/rate.hpp"

using namespace bitlab;

namespace {

const std::vector<double> kSteps = {100, 200, 400, 800, 1600};

// `seeds` samples per T of error(T) · exp(sigma · z), z ~ N(0, 1) from a fixed generator.
std::vector<RateSample> samples_of(const std::function<double(double)>& error, int seeds,
                                   double sigma) {
  std::mt19937_64 gen(12345);
  std::normal_distribution<double> z(0.0, 1.0);
  std::vector<RateSample> out;
  for (double t : kSteps) {
    for (int s = 1; s <= seeds; ++s) out.push_back({{t}, s, error(t) * std::exp(sigma * z(gen))});
  }
  return out;
}

}  // namespace

TEST_SUITE("theory") {
  TEST_CASE("the F upper tail matches the tables") {
    // Tolerance 1e-3: the tables' critical values have 4 significant digits.
    CHECK(f_upper_tail(1.0, 1, 1) == doctest::Approx(0.5).epsilon(1e-9));  // exact: symmetry
    CHECK(f_upper_tail(4.103, 2, 10) == doctest::Approx(0.05).epsilon(1e-3));
    CHECK(f_upper_tail(4.938, 3, 20) == doctest::Approx(0.01).epsilon(1e-3));
    CHECK(f_upper_tail(161.45, 1, 1) == doctest::Approx(0.05).epsilon(1e-3));
    CHECK(f_upper_tail(0.0, 2, 10) == 1.0);
  }

  TEST_CASE("a power law passes: with noisy seeds, one seed, two axes") {
    for (const double sigma : {0.05, 0.3}) {
      CAPTURE(sigma);
      const auto samples = samples_of([](double t) { return 3.0 / std::sqrt(t); }, 3, sigma);
      const RateFit fit = fit_rate({"steps"}, samples);
      CHECK(fit.exponents[0].exponent == doctest::Approx(-0.5).epsilon(0.2));
      CHECK_FALSE(fit.check.not_power_law);
      CHECK(fit.check.lack_of_fit_p >= kLackOfFitAlpha);
      REQUIRE(fit.check.local_slopes.size() == 1);
      CHECK(fit.check.local_slopes[0].size() == 4);
    }
    // One seed, no noise: R² = 1, no test, no flag.
    const RateFit exact = fit_rate({"steps"}, samples_of([](double t) { return 1 / t; }, 1, 0.0));
    CHECK(exact.check.r2 == doctest::Approx(1.0));
    CHECK(std::isnan(exact.check.lack_of_fit_p));
    CHECK(exact.check.slope_spread < 1e-9);
    CHECK_FALSE(exact.check.not_power_law);
    // Two axes, error = T^-1/2 n^-1/2: the local exponents of each axis, no flag.
    std::vector<RateSample> grid;
    for (double t : {100.0, 400.0, 1600.0}) {
      for (double n : {1.0, 2.0, 4.0, 8.0}) {
        for (int s = 1; s <= 2; ++s) grid.push_back({{t, n}, s, 1 / std::sqrt(t * n) * (1 + 0.01 * s)});
      }
    }
    const RateFit both = fit_rate({"steps", "cluster.workers"}, grid);
    REQUIRE(both.check.local_slopes.size() == 2);
    CHECK(both.check.local_slopes[0].size() == 2);
    CHECK(both.check.local_slopes[1].size() == 3);
    for (const auto& axis : both.check.local_slopes) {
      for (double v : axis) CHECK(v == doctest::Approx(-0.5).epsilon(1e-9));
    }
    CHECK_FALSE(both.check.not_power_law);
  }

  TEST_CASE("planted: a floor under 1/T and a blow-up are flagged as not power laws") {
    // 1/T + 0.002 with 2 % seed noise (flagged in 100 % of 2000 simulated draws; 98 % at
    // 5 %): local exponents −0.78, −0.64, −0.47, −0.31 (spread 0.47); the least
    // squares line still gives an exponent (−0.55), which alone would look like a rate.
    const auto floor = samples_of([](double t) { return 1 / t + 0.002; }, 3, 0.02);
    const RateFit fit = fit_rate({"steps"}, floor);
    CHECK(fit.check.not_power_law);
    CHECK(fit.check.lack_of_fit_p < kLackOfFitAlpha);
    CHECK(fit.check.slope_spread > kMaxSlopeSpread);
    CHECK(fit.check.local_slopes[0].front() < fit.check.local_slopes[0].back() - 0.3);
    // One seed: the spread alone decides.
    CHECK(fit_rate({"steps"}, samples_of([](double t) { return 1 / t + 0.002; }, 1, 0.0))
              .check.not_power_law);
    // Falls, then blows up (as 1-bit Adam without error feedback across workers can): flagged.
    const auto blowup =
        samples_of([](double t) { return 1 / std::sqrt(t) + 1e-7 * t * t; }, 3, 0.05);
    CHECK(fit_rate({"steps"}, blowup).check.not_power_law);
  }
}
