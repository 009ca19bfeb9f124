#include "sim/kernels/matmul.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace bitlab {

namespace isa_kernels {
// sim/kernels/matmul_{sse2,avx2,avx512}.cpp: one source, three instruction sets.
using MatmulKernel = void(size_t, size_t, size_t, const float*, ptrdiff_t, ptrdiff_t,
                          const float*, size_t, float*, size_t);
MatmulKernel matmul_sse2, matmul_avx2, matmul_avx512;
MatmulKernel matmul_acc_sse2, matmul_acc_avx2, matmul_acc_avx512;
}  // namespace isa_kernels

namespace {
isa_kernels::MatmulKernel* matmul_kernel(Isa isa) {
  return for_isa<isa_kernels::MatmulKernel*>(isa, isa_kernels::matmul_sse2,
                                             isa_kernels::matmul_avx2, isa_kernels::matmul_avx512);
}
isa_kernels::MatmulKernel* matmul_acc_kernel(Isa isa) {
  return for_isa<isa_kernels::MatmulKernel*>(isa, isa_kernels::matmul_acc_sse2,
                                             isa_kernels::matmul_acc_avx2,
                                             isa_kernels::matmul_acc_avx512);
}
}  // namespace

void matmul(size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row, ptrdiff_t a_col,
            const float* b, size_t ldb, float* c, size_t ldc) {
  static isa_kernels::MatmulKernel* const kernel = matmul_kernel(active_isa());
  kernel(m, n, k, a, a_row, a_col, b, ldb, c, ldc);
}

void matmul_isa(Isa isa, size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row,
                ptrdiff_t a_col, const float* b, size_t ldb, float* c, size_t ldc) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("matmul_isa: instruction set ") + isa_name(isa) +
                                " is not supported by this CPU");
  matmul_kernel(isa)(m, n, k, a, a_row, a_col, b, ldb, c, ldc);
}

void matmul_acc(size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row, ptrdiff_t a_col,
                const float* b, size_t ldb, float* c, size_t ldc) {
  static isa_kernels::MatmulKernel* const kernel = matmul_acc_kernel(active_isa());
  kernel(m, n, k, a, a_row, a_col, b, ldb, c, ldc);
}

void matmul_acc_isa(Isa isa, size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row,
                    ptrdiff_t a_col, const float* b, size_t ldb, float* c, size_t ldc) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("matmul_acc_isa: instruction set ") + isa_name(isa) +
                                " is not supported by this CPU");
  matmul_acc_kernel(isa)(m, n, k, a, a_row, a_col, b, ldb, c, ldc);
}

void transpose_into(const float* b, size_t rows, size_t cols, size_t ldb,
                    std::vector<float>& out) {
  out.resize(rows * cols);
  // 32 × 32 blocks so both sides stay in cache.
  constexpr size_t kBlock = 32;
  for (size_t i0 = 0; i0 < rows; i0 += kBlock) {
    for (size_t j0 = 0; j0 < cols; j0 += kBlock) {
      const size_t i1 = std::min(rows, i0 + kBlock), j1 = std::min(cols, j0 + kBlock);
      for (size_t i = i0; i < i1; ++i)
        for (size_t j = j0; j < j1; ++j) out[j * rows + i] = b[i * ldb + j];
    }
  }
}

}  // namespace bitlab
