// The loops of updates.hpp: each applies its element function to every
// element, in parallel above kParallelMinElements (reduce.hpp). Elements are
// independent, so the split over threads changes no bit.
#include "sim/kernels/updates.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "sim/kernels/reduce.hpp"

namespace bitlab::cpu {

namespace {

bool worth_threads(size_t n) { return static_cast<int64_t>(n) > kParallelMinElements; }

}  // namespace

void sgd_update(float* x, const float* g, size_t n, float lr, float wd) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) sgd_step_element(x[k], g[k], lr, wd);
}

void momentum_sgd_update(float* x, float* m, const float* g, size_t n,
                         const MomentumSgdCoeffs& c) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) momentum_sgd_element(x[k], m[k], g[k], c);
}

void lamb_direction(float* m, float* v, const float* g, const float* x, float* u, size_t n,
                    const AdamCoeffs& c) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) {
    adam_moments(m[k], v[k], g[k], c);
    u[k] = adam_direction(m[k], v[k], x[k], c);
  }
}

void scaled_step(float* x, const float* u, size_t n, float step) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) x[k] -= step * u[k];
}

void binsgdm_scale(const float* g, float* m, float* b, float* bmax, float* z, size_t n,
                   const BinSgdmCoeffs& c) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) {
    z[k] = binsgdm_scale_element(m[k], b[k], bmax ? bmax + k : nullptr, g[k], c);
  }
}

void onebit_lamb_worker_momentum(const float* m, const float* g, const float* k_elem, float* out,
                                 size_t n, const AdamCoeffs& c) {
#pragma omp simd
  for (size_t k = 0; k < n; ++k) out[k] = onebit_adam_local_momentum(m[k], g[k], c) * k_elem[k];
}

float onebit_lamb_stage(const OneBitLambStageRow& row, size_t n, float k_p, const AdamCoeffs& c) {
  const auto d = static_cast<int64_t>(n);
  float fmax = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) reduction(max : fmax) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) {
    fmax = std::max(fmax, onebit_lamb_stage_element(row, static_cast<size_t>(k), k_p, c));
  }
  return fmax;
}

void sqrt_plus_eps(float* den, const float* v, size_t n, float eps) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) den[k] = std::sqrt(v[k]) + eps;
}

void momentum_then_onebit_update(float* x, float* m, const float* v, const float* g, size_t n,
                                 const AdamCoeffs& c) {
  const auto d = static_cast<int64_t>(n);
#pragma omp parallel for schedule(static) if (worth_threads(n))
  for (int64_t k = 0; k < d; ++k) {
    m[k] = onebit_adam_local_momentum(m[k], g[k], c);
    onebit_adam_update_element(x[k], m[k], v[k], nullptr, c);
  }
}

}  // namespace bitlab::cpu
