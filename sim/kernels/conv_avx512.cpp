// The convolution's data movement (conv_kernels.inc) compiled for AVX-512 (flags
// in CMakeLists.txt: BITLAB_ISA_SOURCES); selected at run time by
// sim/kernels/conv.cpp. 8 floats per vector, as AVX2: the runs start 32 bytes
// apart (8-channel pixels), so a 64-byte move would straddle two cache lines
// half of the time; measured alone, col2im of 4 samples took 4.8 µs with
// 16-float moves and 3.5 µs with 8-float ones, conv2's im2col 3.0 and 2.5 µs.
#include <cstddef>

#include "sim/kernels/conv.hpp"

namespace bitlab::isa_kernels {
#define BITLAB_CONV_PREFIX conv_avx512
#define BITLAB_CONV_LANES 8
#include "sim/kernels/conv_kernels.inc"
#undef BITLAB_CONV_LANES
#undef BITLAB_CONV_PREFIX
}  // namespace bitlab::isa_kernels
