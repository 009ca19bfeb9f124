// fill_normal's batched body compiled for AVX512 (flags in CMakeLists.txt:
// BITLAB_ISA_SOURCES); selected at run time by sim/core/isa.cpp.
#include <cstddef>
#include <cstdint>

#include "sim/core/normal_math.hpp"

namespace bitlab::isa_kernels {
#define BITLAB_NORMAL_KERNEL normal_blocks_avx512
#include "sim/core/normal_kernels.inc"
#undef BITLAB_NORMAL_KERNEL
}  // namespace bitlab::isa_kernels
