// The dispatched hot loops (isa_kernels.inc) compiled for AVX-512 (flags in
// CMakeLists.txt: BITLAB_ISA_SOURCES); selected at run time by dispatch.cpp.
#include <cstddef>
#include <cstdint>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "sim/kernels/dispatch.hpp"

namespace bitlab::isa_kernels {
namespace avx512 {
#define BITLAB_KERNEL_TABLE table
#define BITLAB_KERNEL_ISA Isa::kAvx512
#include "sim/kernels/isa_kernels.inc"
#undef BITLAB_KERNEL_ISA
#undef BITLAB_KERNEL_TABLE
}  // namespace avx512
}  // namespace bitlab::isa_kernels
