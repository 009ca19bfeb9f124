// CPU twins of the CUDA kernels (sim/cuda/kernels.hpp): plain functions
// over raw pointers that *are* the simulator's code path — OneBitAllreduce,
// Adam, 1-bit Adam, 0/1 Adam and the binarize compressor call them — and that
// the kernels in namespace bitlab::cuda mirror signature for signature (with
// device pointers). Layout conventions shared by both sides:
//   - packed signs: element k is bit (7 − k mod 8) of byte k/8 (MSB first),
//     bit set = +1, sign(0) = sign(−0) = +1, NaN packs as −1;
//   - norms: sum of squares in double over fixed blocks of kSumBlock = 4096
//     elements starting at the buffer's first element, then over the blocks
//     in order (blocked_sum, reduce.hpp);
//   - random draws: element k uses lane k mod 4 of rng.block(k/4).
#pragma once

#include <cstddef>
#include <cstdint>

#include "sim/core/rng.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/kernels/elements.hpp"
#include "sim/kernels/quantize_elements.hpp"
#include "sim/kernels/quantize_spec.hpp"
#include "sim/kernels/worker_tree.hpp"

namespace bitlab::cpu {

// The references (host pointers); the documentation is in kernel_api.inc.
#include "sim/kernels/kernel_api.inc"

// 1-bit Adam's worker stage fused (CPU only; no CUDA twin): the same bits as
// onebit_adam_momentum(m, g, d, b, c) followed by onebit_worker_compress(b, d,
// e, D, bits, scale), in one pass, the error update deferred to the next call
// (OneBitAllreduce::run_momentum). The sign bits do not depend on the
// scale, so one pass can form u, its block sums and its signs; e − a·sign(u)
// then needs the scale, which needs every block, so it is left in e as u and
// applied, the same float operation, at the start of the next call's pass.
// Block `block` (elements [block·kSumBlock, …) ∩ [0, D)): when prev_table
// is not null, e holds the previous call's u and bits its signs, and first
// e −= prev_table[sign] (the error that call's second pass would have
// written); then e += onebit_adam_local_momentum(m, g) for k < d; writes the
// block's sign bytes and returns its Σ e² (the fixed lanes of dispatch.hpp).
double onebit_adam_worker_block(const float* m, const float* g, size_t d, const AdamCoeffs& c,
                                float* e, size_t D, uint8_t* bits, const float* prev_table,
                                size_t block);
// 0/1 Adam, a sync step whose local step starts from the shared x and m
// (every worker's, u = 0; CPU only, no CUDA twin): out = u ⊙ den as
// zero_one_local_step(x, m, u = 0, g) then zero_one_scale_u would leave it,
// bit for bit, with x and m unwritten (the sync overwrites both). One
// thread: the caller runs one worker per thread.
void zero_one_sync_input(const float* x, const float* m, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c, float* out);
// table[8·b + t] = bit (7 − t) of b set ? +a : −a, 2048 floats: ±a per sign byte.
void onebit_sign_table(float a, float* table);
// e −= table[sign] over D elements: a deferred error update, applied.
void onebit_settle_error(float* e, size_t D, const uint8_t* bits, const float* table);

}  // namespace bitlab::cpu
