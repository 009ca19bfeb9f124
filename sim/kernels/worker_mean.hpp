// The mean over workers whose bits every result depends on (docs/design.md,
// "Deterministic by construction"): a fixed pairwise tree over the workers'
// rows, in the simulator and across MPI ranks alike. Plain arithmetic, never
// logged: the Communicator (sim/comm/comm.hpp) calls it for its allreduce and
// counts the bytes, the Cluster builds its streamed gradient mean from its
// pieces, and the metrics use it for measurements that must not count as
// traffic. worker_tree.hpp spells the same tree out for the CUDA kernels.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "sim/core/float16.hpp"
#include "sim/core/function_ref.hpp"

namespace bitlab {

// Buffers of `len` floats, one per worker of `count`. Only the workers
// [first, first + resident_count()) are held (the simulator holds all: first
// 0, resident 0 = all); worker i's buffer is at data + (i − first) · stride.
// Under the MPI backend a rank holds its own block only, so per-rank memory
// scales with workers/ranks; indexing a worker it does not hold is a bug.
struct WorkerBuffers {
  float* data = nullptr;
  size_t stride = 0;
  size_t len = 0;
  int count = 0;
  int first = 0;     // global index of the first resident worker
  int resident = 0;  // resident workers; 0 = all `count`
  int resident_count() const { return resident ? resident : count; }
  std::span<float> operator[](int i) const {
    return {data + static_cast<size_t>(i - first) * stride, len};
  }
};

// out[k] = (sum_i w(in_i[k])) / n where w() rounds to the wire type, the sum
// runs over workers as a fixed pairwise tree (so n identical buffers, n a power
// of two, give that buffer back exactly), and the result is rounded to the
// wire type. Not logged: this is the arithmetic, used by the communicator and
// by measurements (metrics) that must not count as traffic.
void mean_over_workers(const WorkerBuffers& in, std::span<float> out, WireDtype wire);
// The same tree over n doubles (losses).
double tree_mean(std::span<const double> values);

// The pieces of mean_over_workers for a caller that builds the same fixed
// pairwise tree in parts (the Cluster's streamed gradient mean: rows made a
// block at a time, never all held at once). sum_over_workers writes the tree's
// node over the rows of `in` (the wire-rounded rows' sum, not divided); a
// node's value depends only on its rows, so a tree assembled from such nodes
// (left += right, split as mean_over_workers splits: lo + n/2) and finished by
// finish_mean gives mean_over_workers' bits. Single-threaded: callers run
// several at once on distinct nodes.
void sum_over_workers(const WorkerBuffers& in, std::span<float> out, WireDtype wire);
// out = wire((left + right) / n) elementwise: the root's add fused with the
// mean's division and rounding (the same float operations, in that order).
// `right` may be empty (a one-node tree: out = wire(left / n)). Parallel.
void finish_mean(std::span<const float> left, std::span<const float> right, int n,
                 std::span<float> out, WireDtype wire);

// mean_over_workers with the fp32 wire for rows that are not all held at once
// (the MPI backend: a rank holds its own workers' rows and receives the others' as
// compressed images). fill(i, dst) writes worker i's len values into dst. The
// same fixed pairwise tree, evaluated depth first, so only ceil(log2 n)
// len-sized partial sums live at once (in `scratch`, grown to that once and
// reused): bit-identical to mean_over_workers over the same rows.
void streamed_mean(int n, size_t len, FunctionRef<void(int, std::span<float>)> fill,
                   std::span<float> out, std::vector<float>& scratch);

}  // namespace bitlab
