// The convolution's data movement (conv_kernels.inc) compiled for SSE2 (flags
// in CMakeLists.txt: BITLAB_ISA_SOURCES); selected at run time by
// sim/kernels/conv.cpp. 4 floats per vector.
#include <cstddef>

#include "sim/kernels/conv.hpp"

namespace bitlab::isa_kernels {
#define BITLAB_CONV_PREFIX conv_sse2
#define BITLAB_CONV_LANES 4
#include "sim/kernels/conv_kernels.inc"
#undef BITLAB_CONV_LANES
#undef BITLAB_CONV_PREFIX
}  // namespace bitlab::isa_kernels
