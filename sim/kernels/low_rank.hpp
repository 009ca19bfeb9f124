// PowerSGD's matrix arithmetic (Vogels, Karimireddy & Jaggi, "PowerSGD:
// Practical Low-Rank Gradient Compression for Distributed Optimization",
// NeurIPS 2019, Algorithm 1), as torch 1.13's DDP hook computes it
// (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py:
// powerSGD_hook's torch.bmm calls and _orthogonalize). Row-major float
// matrices. The products sum in float in a fixed order (the norms and dot
// products of the orthogonalization in double), so the bits do not depend on
// the thread count or the instruction set; nothing allocates. Departure:
// torch's bmm (a BLAS sgemm) sums in another, blocked order, so bitlab agrees
// with it to float rounding, not bit for bit.
#pragma once

#include <cstddef>

namespace bitlab {

// P = M·Q: M is rows × cols, Q is cols × rank, P is rows × rank.
void low_rank_project(const float* m, size_t rows, size_t cols, const float* q, size_t rank,
                      float* p);
// Q = Mᵀ·P: M is rows × cols, P is rows × rank, Q is cols × rank.
void low_rank_project_back(const float* m, size_t rows, size_t cols, const float* p, size_t rank,
                           float* q);
// M = P·Qᵀ: P is rows × rank, Q is cols × rank, M is rows × cols.
void low_rank_expand(const float* p, const float* q, size_t rows, size_t cols, size_t rank,
                     float* m);
// Orthonormal columns of the rows × rank matrix A in place, by Gram-Schmidt in
// the hook's order (_orthogonalize_gram_schmidt): column i is divided by its
// norm (+ epsilon when epsilon > 0), then its projection is removed from every
// later column. A zero column with epsilon 0 becomes NaN, as torch's division
// by a zero norm does. torch takes Householder QR (torch.linalg.qr) for rank
// > 2, with no epsilon: its Q differs from Gram-Schmidt's only in the signs of
// columns, which cancel in P·Qᵀ (Q = Mᵀ·P carries the same signs), so the
// caller passes epsilon 0 there and the decompressed gradient agrees.
void orthogonalize_columns(float* a, size_t rows, size_t rank, double epsilon);

}  // namespace bitlab
