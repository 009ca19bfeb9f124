// matmul's body compiled for AVX512 (flags in CMakeLists.txt: BITLAB_ISA_SOURCES);
// selected at run time by sim/kernels/matmul.cpp. 16 floats per vector, a
// register tile of 8 rows × 2 vectors.
#include <cstddef>

namespace bitlab::isa_kernels {
#define BITLAB_MATMUL_KERNEL matmul_avx512
#define BITLAB_MATMUL_ACC_KERNEL matmul_acc_avx512
#define BITLAB_MATMUL_LANES 16
#define BITLAB_MATMUL_ROWS 8
#include "sim/kernels/matmul_kernels.inc"
#undef BITLAB_MATMUL_ROWS
#undef BITLAB_MATMUL_LANES
#undef BITLAB_MATMUL_ACC_KERNEL
#undef BITLAB_MATMUL_KERNEL
}  // namespace bitlab::isa_kernels
