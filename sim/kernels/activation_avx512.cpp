// sim/kernels/activations.hpp's loops compiled for AVX512 (flags in CMakeLists.txt:
// BITLAB_ISA_SOURCES); selected at run time by sim/kernels/activations.cpp.
#include <cstddef>

#include "sim/kernels/activation_table.hpp"

namespace bitlab::isa_kernels {
#define BITLAB_ACTIVATION_TABLE activations_avx512
#include "sim/kernels/activation_kernels.inc"
#undef BITLAB_ACTIVATION_TABLE
}  // namespace bitlab::isa_kernels
