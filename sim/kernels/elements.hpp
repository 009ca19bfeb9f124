// Element updates shared, as the very same code, by the simulator's loops and
// the CUDA kernels in sim/cuda/ (BITLAB_HD makes them device functions under
// nvcc). Each takes and returns plain floats; the loops around them live in
// this folder (cpu_kernels.cpp and the per-instruction-set isa_kernels.inc, CPU)
// and in sim/cuda/kernels.cu (GPU). The optimizers' rules are filed by
// optimizer, each in a file named after it (adam_elements.hpp,
// onebit_adam_elements.hpp, zero_one_adam_elements.hpp), included here for
// the loops; BinSGDM's binarization is below.
//
// Bit-identity with the GPU needs the same float operations in the same
// order: the CUDA build uses -fmad=false (no a·b+c contraction into an FMA;
// the host build has none either on baseline x86-64, flagged: BITLAB_NATIVE
// may let the host compiler contract) and IEEE division and square root
// (nvcc's defaults without --use_fast_math).
#pragma once

#include <cmath>
#include <cstdint>

#include "sim/core/hd.hpp"
#include "sim/core/rng.hpp"
#include "sim/kernels/adam_elements.hpp"
#include "sim/kernels/onebit_adam_elements.hpp"
#include "sim/kernels/zero_one_adam_elements.hpp"

namespace bitlab {

// BinSGDM's randomized binarization of one element (docs/algorithms.md §7):
// +1 with probability (1 + z)/2, else −1, as a bool (true = +1), from 24 bits
// of `draw`. Clamping z to [−1, 1] needs no code: with u ∈ (0, 1], z > 1 gives
// p > 1 (always +1), z < −1 gives p < 0 (always −1), and NaN compares false
// (−1). No branches, so the loop vectorises.
BITLAB_HD inline bool binarize_one(float z, uint32_t draw) {
  return u32_to_unit_open0(draw) <= 0.5f * (1.0f + z);
}

}  // namespace bitlab
