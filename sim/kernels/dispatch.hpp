// The hot loops of sim/kernels/cpu_kernels.cpp (and of the quantizer), compiled
// once per x86-64 instruction set from one source (isa_kernels.inc, included
// by isa_sse2.cpp, isa_avx2.cpp, isa_avx512.cpp) and picked at run time by
// active_isa() (sim/core/isa.hpp; BITLAB_ISA forces one).
//
// Bit-identical by construction, whatever the variant:
//   - elementwise float operations are the element functions of elements.hpp
//     and quantize_elements.hpp, in the same order, with no FMA contraction
//     (-ffp-contract=off on these files; -mavx2 without -mfma) and IEEE
//     division and square root, so the vector width cannot change a rounding;
//   - the one reduction in floating point, the sum of squares, has its lanes
//     written in the source: 4 double partial sums (element k of a block into
//     lane k mod 4, the last len mod 4 elements into lane 0 in order), combined
//     as ((l0 + l1) + l2) + l3. That is exactly what GCC made of the former
//     `#pragma omp simd reduction(+ : s)` loop for SSE2 (checked on its
//     assembly), so the default build's bits did not change;
//   - sign packing and integer maxima are exact.
// The "every dispatched variant" test in tests/test_onebit.cpp runs each
// variant this CPU supports against the SSE2 one.
#pragma once

#include <cstddef>
#include <cstdint>

#include "sim/core/isa.hpp"
#include "sim/kernels/elements.hpp"
#include "sim/kernels/quantize_elements.hpp"

namespace bitlab::isa_kernels {

// One variant's loops. Pointers of one call never alias one another (except
// where said). `n` is an element count; none needs to be a multiple of
// anything unless said.
struct KernelTable {
  Isa isa;
  // Adam's step (adam_step_element) on [0, n).
  void (*adam_update)(float* x, float* m, float* v, const float* g, size_t n, const AdamCoeffs& c);
  // out = onebit_adam_local_momentum(m, g) on [0, n).
  void (*onebit_adam_momentum)(const float* m, const float* g, size_t n, float* out,
                               const AdamCoeffs& c);
  // onebit_adam_update_element on [0, n) (mask may be null).
  void (*onebit_adam_update)(float* x, float* m, const float* v, const float* mask, size_t n,
                             const AdamCoeffs& c);
  void (*zero_one_local_step)(float* x, float* m, float* u, const float* g, const float* den,
                              size_t n, const ZeroOneLocalCoeffs& c);
  void (*zero_one_scale_u)(float* u, const float* den, size_t n);
  // out = (0 − δ) ⊙ den with δ of zero_one_local_element on copies of x and
  // m (and u = 0): the two kernels above on a worker whose u is 0, unwritten.
  void (*zero_one_sync_input)(const float* x, const float* m, const float* g, const float* den,
                              size_t n, const ZeroOneLocalCoeffs& c, float* out);
  void (*zero_one_sync)(float* m0, float* x, const float* ubar, const float* den, size_t n,
                        double lrs);

  // One block of the 1-bit allreduce's norm (n ≤ kSumBlock elements), each
  // returning the block's Σ u² in double with the fixed lanes above:
  //   sum_squares:          u = p (read only)
  //   add_sum_squares:      e[k] += b[k] for k < n_add, then u = e
  //   mean_add_sum_squares: s[k] += acc[k] / nf, then u = s (the server's mean)
  //   momentum_worker_block (1-bit Adam's deferred worker stage, n a multiple
  //     of 8): e −= table[sign] as bits says (when table is not null), then
  //     e[k] += onebit_adam_local_momentum(m[k], g[k]) for k < n_add, u = e,
  //     and bits = sign(u) (overwriting the signs it read).
  double (*sum_squares)(const float* p, size_t n);
  double (*add_sum_squares)(float* e, const float* b, size_t n_add, size_t n);
  double (*momentum_worker_block)(float* e, uint8_t* bits, const float* table, const float* m,
                                  const float* g, size_t n_add, size_t n, const AdamCoeffs& c);
  double (*mean_add_sum_squares)(float* s, const float* acc, float nf, size_t n);
  // bits = sign(u) MSB first (u ≥ 0 ⇒ 1, NaN ⇒ 0), u −= a·sign(u); len a
  // multiple of 8.
  void (*pack_and_subtract)(float* u, size_t len, float a, uint8_t* bits);
  // u −= table[8·bits[j] + t] (table: ±a as onebit_sign_table writes it):
  // the second half of pack_and_subtract, alone, to settle a deferred update.
  // len a multiple of 8.
  void (*subtract_signs)(float* u, const uint8_t* bits, size_t len, const float* table);
  // acc[8j + t] += table[8·bytes[j] + t] for j < nbytes (the server's sum of
  // ±a_i through a 256-entry expansion table).
  void (*expand_accumulate)(const uint8_t* bytes, size_t nbytes, const float* table, float* acc);

  // The n-bit quantizer: max |x| (bit patterns, NaN above inf), and one
  // group's nearest rounding out[k] = coder.nearest(y[k], m)·step (y and out
  // may be the same array).
  float (*max_abs)(const float* x, size_t n);
  void (*quantize_nearest)(const float* y, size_t n, const GroupCoder& coder, float m, float step,
                           float* out);
  // LoCo's e = ema_error_element(e, h, ch, b, c) on [0, n).
  void (*ema_error_update)(float* e, const float* h, const float* ch, size_t n, float b, float c);
};

// The variant for `isa`; std::invalid_argument when this CPU lacks it.
const KernelTable& kernel_table(Isa isa);
// kernel_table(active_isa()).
const KernelTable& active_kernels();

}  // namespace bitlab::isa_kernels
