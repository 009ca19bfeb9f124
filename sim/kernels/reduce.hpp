// Deterministic reductions (docs/design.md: "Reductions sum in a fixed
// order"). Every sum over elements whose bits matter is formed over the same
// fixed blocks of kSumBlock elements, each block summed in double, then the
// block sums added in block order from 0.0 (blocked_sum), so the result is the
// same for any thread count. The 1-bit allreduce's norms (cpu_kernels.cpp) and
// the CUDA kernels' (sim/cuda/kernels.cu) use the same blocks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace bitlab {

// Elements per block of every fixed-order sum.
inline constexpr size_t kSumBlock = 4096;

// Below this many elements an elementwise loop runs serially: fork/join costs
// more than it saves. Elements are independent, so the result is bit-identical
// for any thread count either way.
inline constexpr int64_t kParallelMinElements = 4096;

// Σ_b block(lo_b, hi_b) over the blocks [b·kSumBlock, min(n, (b+1)·kSumBlock)),
// added in block order from 0.0, one after another on the calling thread (the
// 1-bit allreduce's norms: a block is updated while it is in cache, and the
// caller runs workers in parallel). reduce.cpp's sums run the same blocks in
// the same order with the blocks spread over threads.
template <class Block>
double blocked_sum(size_t n, Block&& block) {
  double total = 0.0;
  for (size_t lo = 0; lo < n; lo += kSumBlock) total += block(lo, lo + kSumBlock < n ? lo + kSumBlock : n);
  return total;
}

double sum_squares(std::span<const float> x);
double dot(std::span<const float> a, std::span<const float> b);
inline double norm2(std::span<const float> x) { return std::sqrt(sum_squares(x)); }
// Sum of squares of (a - b).
double distance_squared(std::span<const float> a, std::span<const float> b);
bool all_finite(std::span<const float> x);

}  // namespace bitlab
