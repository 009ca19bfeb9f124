// matmul's body compiled for SSE2 (flags in CMakeLists.txt: BITLAB_ISA_SOURCES);
// selected at run time by sim/kernels/matmul.cpp. 4 floats per vector, a
// register tile of 6 rows × 2 vectors.
#include <cstddef>

namespace bitlab::isa_kernels {
#define BITLAB_MATMUL_KERNEL matmul_sse2
#define BITLAB_MATMUL_ACC_KERNEL matmul_acc_sse2
#define BITLAB_MATMUL_LANES 4
#define BITLAB_MATMUL_ROWS 6
#include "sim/kernels/matmul_kernels.inc"
#undef BITLAB_MATMUL_ROWS
#undef BITLAB_MATMUL_LANES
#undef BITLAB_MATMUL_ACC_KERNEL
#undef BITLAB_MATMUL_KERNEL
}  // namespace bitlab::isa_kernels
