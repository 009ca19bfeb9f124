// mean_over_workers' fixed pairwise tree over workers (worker_mean.cpp) in a
// form a CUDA kernel can run per element: a postfix program. Shared by the
// CUDA dequantize-reduce (LoCo) and the test that checks it against the
// simulator's mean on the CPU. Header-only: the CUDA library uses it without
// the simulator's core library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/core/hd.hpp"

namespace bitlab {

// The tree as a postfix program (worker_tree_program below builds it): an
// entry i ≥ 0 pushes worker i's value, kWorkerTreeAdd replaces the top two
// values by their sum. Evaluating it gives the tree's sum bit for bit, with no
// recursion (the CUDA dequantize-reduce kernel runs it per element).
inline constexpr int32_t kWorkerTreeAdd = -1;
// Values on the stack at most: the tree's height + 1 ≤ 31 for n ≤ 2^30.
inline constexpr int kWorkerTreeStack = 32;
inline constexpr int kWorkerTreeMaxWorkers = 1 << 30;

// Σ over workers of p[i·stride] in the program's order.
BITLAB_HD inline float worker_tree_sum(const int32_t* program, size_t length, const float* p,
                                       size_t stride) {
  float stack[kWorkerTreeStack];
  int top = 0;
  for (size_t j = 0; j < length; ++j) {
    const int32_t op = program[j];
    if (op != kWorkerTreeAdd) {
      stack[top++] = p[static_cast<size_t>(op) * stride];
    } else {
      --top;
      stack[top - 1] = stack[top - 1] + stack[top];  // left subtree + right subtree
    }
  }
  return stack[0];
}

namespace detail {

// Postfix program of the tree over workers [lo, hi): the same split as
// tree_sum in worker_mean.cpp (n = 2 there is a + b, which this gives too).
inline void emit_worker_tree(int lo, int hi, std::vector<int32_t>& program) {
  if (hi - lo == 1) {
    program.push_back(lo);
    return;
  }
  const int mid = lo + (hi - lo) / 2;
  emit_worker_tree(lo, mid, program);
  emit_worker_tree(mid, hi, program);
  program.push_back(kWorkerTreeAdd);
}

}  // namespace detail

// The tree over n workers (1 ≤ n ≤ kWorkerTreeMaxWorkers) as the program
// worker_tree_sum() runs: 2n − 1 entries. Host only.
inline std::vector<int32_t> worker_tree_program(int n) {
  if (n < 1 || n > kWorkerTreeMaxWorkers)
    throw std::invalid_argument("worker_tree_program: n = " + std::to_string(n) +
                                " workers, must be in [1, 2^30]");
  std::vector<int32_t> program;
  program.reserve(2 * static_cast<size_t>(n) - 1);
  detail::emit_worker_tree(0, n, program);
  return program;
}

}  // namespace bitlab
