// Matrix products whose bits do not depend on the instruction set, the thread
// count or how rows are grouped into one call: the real problems' forward,
// weight-gradient and input-gradient products (problems/), so that the
// workers' samples can be multiplied in one product (docs/design.md,
// "Deterministic by construction").
//
// Every element is a sum in a fixed order, in float, each product rounded and
// then added (no FMA, since SSE2 has none):
//   C(i, j) = (…((0 + A(i,0)·B(0,j)) + A(i,1)·B(1,j)) + …) + A(i,k−1)·B(k−1,j).
// The kernels (matmul_kernels.inc, compiled for SSE2, AVX2 and AVX-512 by
// matmul_{sse2,avx2,avx512}.cpp, picked by active_isa()) put output columns in
// vector lanes and rows in registers, so the vector width and the register
// tile change only which elements are computed together, never an element's
// order of operations. The `matmul` suite checks every variant against a
// scalar loop bit for bit, for odd shapes and strides.
//
// Departure from Eigen (which the problems used before): Eigen's blocked GEMM
// sums each element in an order that depends on its kernel's blocking and
// vector width, and so on the build's instruction set.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/core/isa.hpp"

namespace bitlab {

// C (m × n) = A · B with A(i, p) = a[i·a_row + p·a_col] (any strides: A may be
// a transposed view), B(p, j) = b[p·ldb + j], C(i, j) = c[i·ldc + j]. C must
// not overlap A or B. k = 0 writes zeros.
void matmul(size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row, ptrdiff_t a_col,
            const float* b, size_t ldb, float* c, size_t ldc);

// The same with a forced variant (tests; std::invalid_argument when this CPU
// lacks it).
void matmul_isa(Isa isa, size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row,
                ptrdiff_t a_col, const float* b, size_t ldb, float* c, size_t ldc);

// C (m × n) += A · B, each element's sum continued from the value in C: a
// product over k = k1 + k2 gives the same bits as matmul over the first k1
// then matmul_acc over the last k2 (so a weight gradient can be summed over
// a layer's rows a block at a time, each block's operands still in cache:
// problems/cnn.cpp). C starting at +0 gives matmul's bits.
void matmul_acc(size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row, ptrdiff_t a_col,
                const float* b, size_t ldb, float* c, size_t ldc);
void matmul_acc_isa(Isa isa, size_t m, size_t n, size_t k, const float* a, ptrdiff_t a_row,
                    ptrdiff_t a_col, const float* b, size_t ldb, float* c, size_t ldc);

// The three products a layer needs, on row-major Eigen matrices, maps or row
// blocks (anything with data(), rows(), cols(), outerStride()); `c` must
// already have its shape.
//   c = a · b            (input gradient δ·W)
//   c = aᵀ · b           (weight gradient δᵀ·X: the sum runs over a's rows)
//   c = a · bᵀ           (forward X·Wᵀ: bᵀ is packed into `scratch` first)
template <class A, class B, class C>
void matmul_nn(const A& a, const B& b, C&& c) {
  matmul(size_t(c.rows()), size_t(c.cols()), size_t(a.cols()), a.data(), a.outerStride(), 1,
         b.data(), size_t(b.outerStride()), c.data(), size_t(c.outerStride()));
}
template <class A, class B, class C>
void matmul_tn(const A& a, const B& b, C&& c) {
  matmul(size_t(c.rows()), size_t(c.cols()), size_t(a.rows()), a.data(), 1, a.outerStride(),
         b.data(), size_t(b.outerStride()), c.data(), size_t(c.outerStride()));
}
// bᵀ (b: rows × cols, row stride ldb) into out (cols × rows, contiguous).
void transpose_into(const float* b, size_t rows, size_t cols, size_t ldb, std::vector<float>& out);
template <class A, class B, class C>
void matmul_nt(const A& a, const B& b, C&& c, std::vector<float>& scratch) {
  transpose_into(b.data(), size_t(b.rows()), size_t(b.cols()), size_t(b.outerStride()), scratch);
  matmul(size_t(c.rows()), size_t(c.cols()), size_t(a.cols()), a.data(), a.outerStride(), 1,
         scratch.data(), size_t(b.rows()), c.data(), size_t(c.outerStride()));
}

}  // namespace bitlab
