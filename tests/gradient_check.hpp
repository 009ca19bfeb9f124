// Central finite-difference checks of a problem's gradient, shared by the
// synthetic and the real problems' suites. The quotient is taken in double
// over the step actually applied to the float parameter (x ± h rounded to
// float), so parameter rounding does not enter the comparison.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "problems/problem.hpp"
#include "sim/core/rng.hpp"

namespace bitlab::testing {

struct FdTolerance {
  double h;        // step
  double rel;      // allowed error relative to the analytic value
  double abs_tol;  // plus this absolute allowance
};

inline double fd_loss_at(const Problem& p, std::span<const float> x,
                         std::span<const uint32_t> batch, Workspace& ws) {
  std::vector<float> g(p.dim());
  return p.loss_grad(x, batch, g, RngStream(0, Purpose::kGradNoise), ws);
}

// Checks g (the analytic gradient at x for `batch`) coordinate by coordinate
// at `coords`, and along `direction` (one quotient covering every coordinate
// at once): |fd − g| <= rel·|g| + abs_tol.
inline void check_gradient_fd(const Problem& p, std::span<const float> x,
                              std::span<const uint32_t> batch, std::span<const float> g,
                              const std::vector<size_t>& coords, std::span<const float> direction,
                              const FdTolerance& tol, Workspace& ws) {
  for (const size_t k : coords) {
    std::vector<float> xp(x.begin(), x.end()), xm(x.begin(), x.end());
    xp[k] = static_cast<float>(x[k] + tol.h);
    xm[k] = static_cast<float>(x[k] - tol.h);
    const double fd = (fd_loss_at(p, xp, batch, ws) - fd_loss_at(p, xm, batch, ws)) /
                      (static_cast<double>(xp[k]) - xm[k]);
    CHECK_MESSAGE(std::abs(fd - g[k]) <= tol.rel * std::abs(g[k]) + tol.abs_tol,
                  "coordinate " << k << ": fd " << fd << " vs grad " << g[k]);
  }
  std::vector<float> xp(p.dim()), xm(p.dim());
  double applied = 0.0, norm_sq = 0.0;  // Σ g_i (xp_i − xm_i) and its step's norm²
  for (size_t i = 0; i < xp.size(); ++i) {
    xp[i] = static_cast<float>(x[i] + tol.h * direction[i]);
    xm[i] = static_cast<float>(x[i] - tol.h * direction[i]);
    const double step = static_cast<double>(xp[i]) - xm[i];
    applied += g[i] * step;
    norm_sq += step * step;
  }
  const double fd_dir = fd_loss_at(p, xp, batch, ws) - fd_loss_at(p, xm, batch, ws);
  const double scale = std::sqrt(norm_sq);  // ≈ 2h‖v‖
  CHECK_MESSAGE(
      std::abs(fd_dir - applied) / scale <= tol.rel * std::abs(applied) / scale + tol.abs_tol,
      "direction: fd " << fd_dir << " vs g·Δ " << applied);
}

}  // namespace bitlab::testing
