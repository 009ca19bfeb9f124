// The convolution's data movement (conv_kernels.inc) compiled for AVX2 (flags
// in CMakeLists.txt: BITLAB_ISA_SOURCES); selected at run time by
// sim/kernels/conv.cpp. 8 floats per vector.
#include <cstddef>

#include "sim/kernels/conv.hpp"

namespace bitlab::isa_kernels {
#define BITLAB_CONV_PREFIX conv_avx2
#define BITLAB_CONV_LANES 8
#include "sim/kernels/conv_kernels.inc"
#undef BITLAB_CONV_LANES
#undef BITLAB_CONV_PREFIX
}  // namespace bitlab::isa_kernels
