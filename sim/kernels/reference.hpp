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

#include "sim/core/rng.hpp"
#include "sim/kernels/elements.hpp"
#include "sim/kernels/quantize_elements.hpp"
#include "sim/kernels/quantize_spec.hpp"
#include "sim/kernels/worker_tree.hpp"

namespace bitlab::cpu {

// Elements per block of the fixed-order sums of squares.
inline constexpr size_t kNormBlock = 4096;

// The references (host pointers); the documentation is in kernel_api.inc.
#include "sim/kernels/kernel_api.inc"

// 1-bit Adam's worker stage fused (CPU only; no CUDA twin): the same bits as
// onebit_adam_momentum(m, g, d, b, c) followed by onebit_worker_compress(b, d,
// e, D, bits, scale), in two passes over e instead of three over four arrays:
// pass 1 forms u = e + (β1 m + (1−β1) g) block by block with ‖u‖², pass 2
// writes the signs and the new error.
void onebit_adam_worker_compress(const float* m, const float* g, size_t d, const AdamCoeffs& c,
                                 float* e, size_t D, uint8_t* bits, float* scale);

}  // namespace bitlab::cpu
