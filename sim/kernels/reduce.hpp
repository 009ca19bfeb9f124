// Deterministic reductions (docs/design.md: "Reductions sum in a fixed
// order"). Every sum over elements whose bits matter is formed over the same
// fixed blocks of kSumBlock elements, each block summed in double, then the
// block sums added in block order from 0.0 (blocked_sum), so the result is the
// same for any thread count. The 1-bit allreduce's norms (reference.cpp) and
// the CUDA kernels' (sim/cuda/kernels.cu) use the same blocks.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace bitlab {

// Elements per block of every fixed-order sum.
inline constexpr size_t kSumBlock = 4096;

// Below this many elements an elementwise loop runs serially: fork/join costs
// more than it saves. Elements are independent, so the result is bit-identical
// for any thread count either way.
inline constexpr int64_t kParallelMinElements = 4096;

// Σ_b block(lo_b, hi_b) over the blocks [b·kSumBlock, min(n, (b+1)·kSumBlock)),
// added in block order from 0.0. With `parallel_blocks` the blocks run on the
// threads (from 16 blocks on) and their sums are added afterwards in the same
// order; without, one after another on the calling thread (a caller already
// inside a parallel region, or a block that updates its elements while they
// are in cache). The same bits either way.
template <class Block>
double blocked_sum(size_t n, Block&& block, bool parallel_blocks) {
  const int64_t blocks = static_cast<int64_t>((n + kSumBlock - 1) / kSumBlock);
  const auto bounds = [n](int64_t b) {
    const size_t lo = static_cast<size_t>(b) * kSumBlock;
    return std::pair<size_t, size_t>{lo, lo + kSumBlock < n ? lo + kSumBlock : n};
  };
  double total = 0.0;
  if (!parallel_blocks || blocks < 16) {
    for (int64_t b = 0; b < blocks; ++b) {
      const auto [lo, hi] = bounds(b);
      total += block(lo, hi);
    }
    return total;
  }
  thread_local std::vector<double> partial;
  if (partial.size() < static_cast<size_t>(blocks)) partial.resize(blocks);
  double* p = partial.data();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const auto [lo, hi] = bounds(b);
    p[b] = block(lo, hi);
  }
  for (int64_t b = 0; b < blocks; ++b) total += p[b];
  return total;
}

double sum_squares(std::span<const float> x);
double dot(std::span<const float> a, std::span<const float> b);
inline double norm2(std::span<const float> x) { return std::sqrt(sum_squares(x)); }
// Sum of squares of (a - b).
double distance_squared(std::span<const float> a, std::span<const float> b);
bool all_finite(std::span<const float> x);

}  // namespace bitlab
