// CPU references of the CUDA kernels; see reference.hpp. These are the loops
// the simulator runs (moved here verbatim from onebit_allreduce.cpp and the
// optimizers, so the simulator's results did not change).
#include "sim/kernels/reference.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/comm/comm.hpp"

namespace bitlab::cpu {
namespace {

// Below this many elements an elementwise loop runs serially (fork/join
// costs more than it saves; elements are independent, so results are the
// same either way). Same value as optimizers/common.hpp's.
constexpr int64_t kParallelMin = 4096;

// Sum of squares over fixed blocks of kNormBlock in double, serial: the same
// whatever thread runs it.
double block_sum_squares(const float* p, size_t n) {
  double total = 0.0;
  for (size_t lo = 0; lo < n; lo += kNormBlock) {
    const size_t hi = std::min(n, lo + kNormBlock);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t k = lo; k < hi; ++k) s += static_cast<double>(p[k]) * p[k];
    total += s;
  }
  return total;
}

// One pass: bits of sign(u) (MSB first, sign(0) = +1) and u -= a·sign(u), for
// len a multiple of 8.
void pack_and_subtract(float* u, size_t len, float a, uint8_t* bits) {
  for (size_t j = 0; j < len / 8; ++j) {
    float* p = u + 8 * j;
    unsigned byte = 0;
    for (int t = 0; t < 8; ++t) {
      const bool pos = p[t] >= 0.0f;
      byte |= static_cast<unsigned>(pos) << (7 - t);
      p[t] -= pos ? a : -a;
    }
    bits[j] = static_cast<uint8_t>(byte);
  }
}

// table[8·b + t] = bit (7 − t) of byte b set ? +a : −a.
void fill_expand_table(float a, float* table) {
  for (int b = 0; b < 256; ++b) {
    for (int t = 0; t < 8; ++t) table[8 * b + t] = (b >> (7 - t)) & 1 ? a : -a;
  }
}

}  // namespace

void onebit_worker_compress(const float* b, size_t d, float* e, size_t D, uint8_t* bits,
                            float* scale) {
  // One pass: e becomes u = b + e (padding: b = 0) and ‖u‖² is summed over
  // the same fixed blocks of 4096 as block_sum_squares, while each block is
  // still in cache.
  double ss = 0.0;
  for (size_t lo = 0; lo < D; lo += kNormBlock) {
    const size_t hi = std::min(D, lo + kNormBlock);
    const size_t hb = std::min(hi, std::max(lo, d));
#pragma omp simd
    for (size_t k = lo; k < hb; ++k) e[k] += b[k];
    double part = 0.0;
#pragma omp simd reduction(+ : part)
    for (size_t k = lo; k < hi; ++k) part += static_cast<double>(e[k]) * e[k];
    ss += part;
  }
  const float a = static_cast<float>(std::sqrt(ss / static_cast<double>(D)));
  *scale = a;
  pack_and_subtract(e, D, a, bits);
}

void onebit_server_reduce(const uint8_t* bits, size_t bits_stride, const float* scales, int n,
                          size_t chunk, float* s, float* acc, uint8_t* out_bits, float* out_scale) {
  // Each worker's sign byte expands through a 256-entry table to its 8 values
  // ±a_i (branch-free, 8 floats at a time); the sums still run over workers
  // in order 0..n−1 from 0, as a plain per-element loop would.
  const size_t chunk_bytes = chunk / 8;
  float table[2048];
  std::fill(acc, acc + chunk, 0.0f);
  for (int i = 0; i < n; ++i) {  // fixed worker order
    const uint8_t* bytes = bits + static_cast<size_t>(i) * bits_stride;
    fill_expand_table(scales[i], table);
    for (size_t j = 0; j < chunk_bytes; ++j) {
      const float* v = table + 8 * static_cast<size_t>(bytes[j]);
      float* y = acc + 8 * j;
#pragma omp simd
      for (int t = 0; t < 8; ++t) y[t] += v[t];
    }
  }
  const float nf = static_cast<float>(n);
#pragma omp simd
  for (size_t k = 0; k < chunk; ++k) s[k] += acc[k] / nf;  // y = mean + s_r, kept in s
  const float cr =
      static_cast<float>(std::sqrt(block_sum_squares(s, chunk) / static_cast<double>(chunk)));
  *out_scale = cr;
  pack_and_subtract(s, chunk, cr, out_bits);
}

void onebit_decode(const uint8_t* server_bits, const float* server_scales, int n, size_t D,
                   size_t d, float* out) {
  // Whole bytes through a per-server table, the last partial byte element by
  // element.
  const size_t chunk_bytes = D / n / 8;
  const int64_t full_bytes = static_cast<int64_t>(d / 8);
  thread_local std::vector<float> tables;
  tables.resize(static_cast<size_t>(n) * 2048);
  for (int r = 0; r < n; ++r)
    fill_expand_table(server_scales[r], tables.data() + static_cast<size_t>(r) * 2048);
  const float* tab = tables.data();
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < full_bytes; ++j) {
    const float* v =
        tab + (static_cast<size_t>(j) / chunk_bytes) * 2048 + 8 * size_t{server_bits[j]};
    std::copy(v, v + 8, out + 8 * j);
  }
  for (size_t k = static_cast<size_t>(full_bytes) * 8; k < d; ++k) {
    const float cr = server_scales[k / (D / n)];
    out[k] = (server_bits[k / 8] >> (7 - k % 8)) & 1u ? cr : -cr;
  }
}

void adam_update(float* x, float* m, float* v, const float* g, size_t d, const AdamCoeffs& c) {
  const int64_t n = static_cast<int64_t>(d);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) adam_step_element(x[k], m[k], v[k], g[k], c);
}

void onebit_adam_momentum(const float* m, const float* g, size_t d, float* m_worker,
                          const AdamCoeffs& c) {
  for (size_t k = 0; k < d; ++k) m_worker[k] = onebit_adam_local_momentum(m[k], g[k], c);
}

void onebit_adam_update(float* x, float* m, const float* v, const float* mask, size_t d,
                        const AdamCoeffs& c) {
  const int64_t n = static_cast<int64_t>(d);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < n; ++k)
    onebit_adam_update_element(x[k], m[k], v[k], mask ? mask + k : nullptr, c);
}

void zero_one_local_step(float* x, float* m, float* u, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c) {
  const int64_t n = static_cast<int64_t>(d);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) zero_one_local_element(x[k], m[k], u[k], g[k], den[k], c);
}

void zero_one_scale_u(float* u, const float* den, size_t d) {
  const int64_t n = static_cast<int64_t>(d);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) u[k] *= den[k];
}

void zero_one_sync(float* m0, float* x, const float* ubar, const float* den, size_t d, double lrs) {
  const int64_t n = static_cast<int64_t>(d);
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t k = 0; k < n; ++k) zero_one_sync_element(m0[k], x[k], ubar[k], den[k], lrs);
}

void binarize_pack(const float* z, size_t d, const RngStream& rng, uint8_t* bits) {
  // One byte (8 elements, two Philox blocks) at a time; element k draws lane
  // k mod 4 of block k/4, as the binarize compressor's apply() does.
  const size_t bytes = (d + 7) / 8;
  for (size_t j = 0; j < bytes; ++j) {
    const PhiloxBlock r0 = rng.block(2 * j), r1 = rng.block(2 * j + 1);
    const uint32_t draws[8] = {r0[0], r0[1], r0[2], r0[3], r1[0], r1[1], r1[2], r1[3]};
    unsigned byte = 0;
    for (size_t t = 0; t < 8 && 8 * j + t < d; ++t)
      byte |= static_cast<unsigned>(binarize_one(z[8 * j + t], draws[t])) << (7 - t);
    bits[j] = static_cast<uint8_t>(byte);
  }
}

void ema_error_update(float* e, const float* h, const float* ch, size_t n, float beta) {
  // fp32 β and 1−β: 1 − fl(β) is exact for β ∈ [0.5, 1) (Sterbenz), so the
  // two weights still sum to 1 there.
  const float c = 1.0f - beta;
  for (size_t k = 0; k < n; ++k) e[k] = ema_error_element(e[k], h[k], ch[k], beta, c);
}

void dequantize_reduce(const float* q, size_t q_stride, int n, size_t len, float* out) {
  // The simulator's own mean (fixed pairwise tree, fp32 wire: no rounding).
  mean_over_workers({const_cast<float*>(q), q_stride, len, n}, {out, len}, WireDtype::kFp32);
}

}  // namespace bitlab::cpu
