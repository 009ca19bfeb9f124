// CPU twins of the CUDA kernels; see cpu_kernels.hpp. These are the loops
// the simulator runs: the hot ones call the variant of isa_kernels::KernelTable
// (dispatch.hpp) that active_isa() picks, which gives the same bits as every
// other variant and as the plain loops these replaced.
#include "sim/kernels/cpu_kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "sim/kernels/dispatch.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/kernels/worker_mean.hpp"

namespace bitlab::cpu {
namespace {

using isa_kernels::active_kernels;
using isa_kernels::KernelTable;

// f(lo, hi) on a static split of [0, n) over the threads (serial at or below
// kParallelMinElements, reduce.hpp). Each element is computed alone, so the split changes no bit;
// the boundaries are multiples of 16 so every thread's share starts on a
// whole vector.
template <class F>
void parallel_ranges(size_t n, F&& f) {
  if (static_cast<int64_t>(n) <= kParallelMinElements) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t lo = t == 0 ? 0 : n * t / nt / 16 * 16;
    const size_t hi = t + 1 == nt ? n : n * (t + 1) / nt / 16 * 16;
    if (lo < hi) f(lo, hi);
  }
}

// The scale ‖u‖/√n of a sum of squares over n elements.
float rms_scale(double sum_squares, size_t n) {
  return static_cast<float>(std::sqrt(sum_squares / static_cast<double>(n)));
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
  // Pass 1: e becomes u = b + e (padding: b = 0) block by block, and ‖u‖² is
  // summed over the same block while it is still in cache. Pass 2: signs and
  // error.
  const KernelTable& t = active_kernels();
  // Serial over the blocks (a block is updated while it is in cache; the
  // caller runs workers in parallel): the same bits on any thread.
  const double ss = blocked_sum(
      D,
      [&](size_t lo, size_t hi) {
        const size_t hb = std::min(hi, std::max(lo, d));
        return t.add_sum_squares(e + lo, b + std::min(lo, d), hb - lo, hi - lo);
      });
  const float a = rms_scale(ss, D);
  *scale = a;
  t.pack_and_subtract(e, D, a, bits);
}

double onebit_adam_worker_block(const float* m, const float* g, size_t d, const AdamCoeffs& c,
                                float* e, size_t D, uint8_t* bits, const float* prev_table,
                                size_t block) {
  const size_t lo = block * kSumBlock, hi = std::min(D, lo + kSumBlock);
  const size_t hb = std::min(hi, std::max(lo, d)), at = std::min(lo, d);
  return active_kernels().momentum_worker_block(e + lo, bits + lo / 8, prev_table, m + at, g + at,
                                                hb - lo, hi - lo, c);
}

void onebit_sign_table(float a, float* table) {
  fill_expand_table(a, table);
}

void onebit_settle_error(float* e, size_t D, const uint8_t* bits, const float* table) {
  active_kernels().subtract_signs(e, bits, D, table);
}

void onebit_server_reduce(const uint8_t* bits, size_t bits_stride, const float* scales, int n,
                          size_t chunk, float* s, float* acc, uint8_t* out_bits, float* out_scale) {
  // Each worker's sign byte expands through its 256-entry table to its 8
  // values ±a_i (branch-free, 8 floats at a time); the sums still run over
  // workers in order 0..n−1 from 0, as a plain per-element loop would. Block
  // by block of the norm: the block's sums over workers, then y = s + sum/n
  // (kept in s) and ‖y‖², all while the block is in cache.
  const KernelTable& t = active_kernels();
  thread_local std::vector<float> tables;
  tables.resize(static_cast<size_t>(n) * 2048);
  for (int i = 0; i < n; ++i) fill_expand_table(scales[i], tables.data() + 2048 * i);
  const float nf = static_cast<float>(n);
  const double ss = blocked_sum(
      chunk,
      [&](size_t lo, size_t hi) {
        std::fill(acc + lo, acc + hi, 0.0f);
        for (int i = 0; i < n; ++i) {  // fixed worker order
          t.expand_accumulate(bits + static_cast<size_t>(i) * bits_stride + lo / 8,
                              (hi - lo) / 8, tables.data() + 2048 * i, acc + lo);
        }
        return t.mean_add_sum_squares(s + lo, acc + lo, nf, hi - lo);
      });
  const float cr = rms_scale(ss, chunk);
  *out_scale = cr;
  t.pack_and_subtract(s, chunk, cr, out_bits);
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
  const KernelTable& t = active_kernels();
  parallel_ranges(
      d, [&](size_t lo, size_t hi) { t.adam_update(x + lo, m + lo, v + lo, g + lo, hi - lo, c); });
}

void onebit_adam_momentum(const float* m, const float* g, size_t d, float* m_worker,
                          const AdamCoeffs& c) {
  active_kernels().onebit_adam_momentum(m, g, d, m_worker, c);
}

void onebit_adam_update(float* x, float* m, const float* v, const float* mask, size_t d,
                        const AdamCoeffs& c) {
  const KernelTable& t = active_kernels();
  parallel_ranges(d, [&](size_t lo, size_t hi) {
    t.onebit_adam_update(x + lo, m + lo, v + lo, mask ? mask + lo : nullptr, hi - lo, c);
  });
}

void zero_one_local_step(float* x, float* m, float* u, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c) {
  const KernelTable& t = active_kernels();
  parallel_ranges(d, [&](size_t lo, size_t hi) {
    t.zero_one_local_step(x + lo, m + lo, u + lo, g + lo, den + lo, hi - lo, c);
  });
}

void zero_one_scale_u(float* u, const float* den, size_t d) {
  const KernelTable& t = active_kernels();
  parallel_ranges(d, [&](size_t lo, size_t hi) { t.zero_one_scale_u(u + lo, den + lo, hi - lo); });
}

void zero_one_sync_input(const float* x, const float* m, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c, float* out) {
  active_kernels().zero_one_sync_input(x, m, g, den, d, c, out);
}

void zero_one_sync(float* m0, float* x, const float* ubar, const float* den, size_t d, double lrs) {
  const KernelTable& t = active_kernels();
  parallel_ranges(d, [&](size_t lo, size_t hi) {
    t.zero_one_sync(m0 + lo, x + lo, ubar + lo, den + lo, hi - lo, lrs);
  });
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
  active_kernels().ema_error_update(e, h, ch, n, beta, c);
}

void dequantize_reduce(const float* q, size_t q_stride, int n, size_t len, float* out) {
  // The simulator's own mean (fixed pairwise tree, fp32 wire: no rounding).
  mean_over_workers({const_cast<float*>(q), q_stride, len, n}, {out, len}, WireDtype::kFp32);
}

}  // namespace bitlab::cpu
