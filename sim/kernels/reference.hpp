// CPU references of the CUDA kernels (sim/cuda/kernels.hpp): plain functions
// over raw pointers that *are* the simulator's code path — OneBitAllreduce,
// Adam, 1-bit Adam, 0/1 Adam and the binarize compressor call them — and that
// the kernels in namespace bitlab::cuda mirror signature for signature (with
// device pointers). Layout conventions shared by both sides:
//   - packed signs: element k is bit (7 − k mod 8) of byte k/8 (MSB first),
//     bit set = +1, sign(0) = sign(−0) = +1, NaN packs as −1;
//   - norms: sum of squares in double over fixed blocks of 4096 elements
//     starting at the buffer's first element, then over the blocks;
//   - random draws: element k uses lane k mod 4 of rng.block(k/4).
#pragma once

#include <cstddef>
#include <cstdint>

#include "sim/kernels/elements.hpp"
#include "sim/kernels/quantize_elements.hpp"
#include "sim/quantize.hpp"
#include "sim/rng.hpp"

namespace bitlab::cpu {

// Elements per block of the fixed-order sums of squares.
inline constexpr size_t kNormBlock = 4096;

// 1-bit allreduce, worker side (algorithms.md §1), one worker:
//   e ← u = pad(b) + e  (b has d elements, e and u have D ≥ d; padding b = 0)
//   *scale = a = ‖u‖₂/√D  (squares summed in double over 4096-blocks)
//   bits = sign(u) (D/8 bytes), e ← u − a·sign(u).   D must be a multiple of 8.
void onebit_worker_compress(const float* b, size_t d, float* e, size_t D, uint8_t* bits,
                            float* scale);

// 1-bit allreduce, server side, one server owning `chunk` elements (a multiple
// of 8): worker i's chunk of signs is at bits + i·bits_stride (chunk/8 bytes)
// and its scale at scales[i].
//   acc = Σ_{i=0..n−1} scales[i]·sign_i   (fp32, from 0, in worker order)
//   s ← y = s + acc/n ; *out_scale = c = ‖y‖₂/√chunk ; out_bits = sign(y) ;
//   s ← y − c·sign(y)
void onebit_server_reduce(const uint8_t* bits, size_t bits_stride, const float* scales, int n,
                          size_t chunk, float* s, float* acc, uint8_t* out_bits, float* out_scale);

// 1-bit allreduce, final unpack: out[k] = c_r·sign(bit k) for k < d, with
// server r = k / (D/n) owning element k; server_bits has D/8 bytes.
void onebit_decode(const uint8_t* server_bits, const float* server_scales, int n, size_t D,
                   size_t d, float* out);

// Adam (algorithms.md §2): adam_step_element on every element.
void adam_update(float* x, float* m, float* v, const float* g, size_t d, const AdamCoeffs& c);

// 1-bit Adam compression stage: m_worker = β1 m + (1−β1) g (one worker).
void onebit_adam_momentum(const float* m, const float* g, size_t d, float* m_worker,
                          const AdamCoeffs& c);
// 1-bit Adam compression stage after the allreduce: m ⊙= mask (mask may be
// null), x −= lr·(m ⊘ (sqrt(v*)+ε) + wd·x) with the frozen variance v*.
void onebit_adam_update(float* x, float* m, const float* v, const float* mask, size_t d,
                        const AdamCoeffs& c);

// 0/1 Adam local step of one worker (zero_one_local_element on every element).
void zero_one_local_step(float* x, float* m, float* u, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c);
// 0/1 Adam sync, before the 1-bit allreduce: u ⊙= den.
void zero_one_scale_u(float* u, const float* den, size_t d);
// 0/1 Adam sync, after it: zero_one_sync_element on every element.
void zero_one_sync(float* m0, float* x, const float* ubar, const float* den, size_t d, double lrs);

// BinSGDM's randomized binarization of z, packed: ceil(d/8) bytes, bit set =
// +1, unused low bits of the last byte 0 (the binarize compressor's wire).
void binarize_pack(const float* z, size_t d, const RngStream& rng, uint8_t* bits);

// n-bit group quantization (sim/quantize.hpp): out = Q(x), groups of
// spec.group_size from x's first element, nearest or stochastic rounding
// (element k draws lane 0 of rng.block(first_index + k)), fp32 or fp16
// scales. x and out may alias. Defined in sim/quantize.cpp (the simulator's
// quantize_dequantize is this after checking the spec).
void quantize_groups(const float* x, size_t n, float* out, const QuantizeSpec& spec,
                     const RngStream& rng, uint64_t first_index);

// LoCo's moving-average error feedback (algorithms.md §6): e = β·e + (1−β)·(h − ĥ)
// with fl(β) and 1 − fl(β) in float; 8-bit error storage is quantize_groups
// (8 bits, nearest) on e afterwards, as ErrorFeedback::update does.
void ema_error_update(float* e, const float* h, const float* ch, size_t n, float beta);

}  // namespace bitlab::cpu
