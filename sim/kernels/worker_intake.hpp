// Workers' gradients arriving one at a time, in any order, summed as
// mean_over_workers' fixed pairwise tree (worker_mean.hpp): the per-worker path
// of a step whose gradients are made outside bitlab (the Python bridge hands
// each worker's gradient in as its block ends, docs/python.md). Nothing waits
// for all n rows: a node is added into its sibling as soon as both are
// complete, so workers taken in order hold at most ceil(log2 n) + 1 rows;
// workers out of order hold the nodes still waiting for a sibling (up to n/2
// rows, for the worst order), with the same bits either way.
//
// The bits are mean_over_workers': a leaf is the worker's row rounded to the
// wire (to_wire), an inner node left + right (one float add, which is
// commutative, so which sibling arrives first does not matter), the root
// wire(node / n), as finish_mean. The worker's row is read once: one pass
// rounds it and adds, level by level, every complete node it completes (its
// sibling, then each ancestor's sibling), writing the result into the
// topmost of them (or a node of its own), with the finiteness check in the
// same pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/core/float16.hpp"

namespace bitlab {

// A contiguous piece of a worker's row: `size` floats at `data`, which belong
// at [offset, offset + size) of the row (one tensor of the model). The pieces
// of a row cover it exactly, in order; a null `data` is a zero piece.
struct RowPiece {
  size_t offset = 0;
  size_t size = 0;
  const float* data = nullptr;
};

// The first element of `pieces` (flat row index) that is not finite, or −1.
// Only called once a fused pass has seen one (it rereads the pieces).
int64_t first_non_finite(std::span<const RowPiece> pieces);

// dst[offset + i] = piece[i] for every piece (zero pieces: 0): the row in one
// buffer, its finiteness checked in the same pass. Returns false when an
// element is not finite (the row is still copied).
bool gather_row_checked(std::span<const RowPiece> pieces, std::span<float> dst);

class WorkerTreeIntake {
 public:
  WorkerTreeIntake() = default;
  // n workers' rows of `dim` floats, summed in the wire type's tree.
  WorkerTreeIntake(int workers, size_t dim, WireDtype wire);
  // The node [lo, hi) of the tree over n workers only (a node of that tree:
  // an MPI rank's largest nodes inside its block of workers, whose values the
  // ranks then combine, Cluster's streamed mean): root() is the node's value.
  WorkerTreeIntake(int workers, int lo, int hi, size_t dim, WireDtype wire);

  // A new step: every node is empty again (the buffers are kept).
  void begin();
  // Worker w's row (each worker once per step). Returns false when an
  // element is not finite: the node it went into is then not the tree's, and
  // the step must not be finished.
  bool take(int worker, std::span<const RowPiece> pieces);
  // After all n rows: out = wire(root / n), mean_over_workers' bits.
  void finish(std::span<float> out) const;
  // After every row of the node: its value (the wire-rounded rows' tree sum,
  // not divided), valid until the next begin().
  std::span<const float> root() const;
  int lo() const { return lo_; }
  int hi() const { return hi_; }
  // Rows taken this step.
  int taken() const { return taken_; }
  WireDtype wire() const { return wire_; }
  // Row buffers held when workers come in order (what the memory check
  // counts): ceil(log2 n) + 1, one row each.
  static int rows_in_order(int workers);
  // Row buffers allocated so far (more after an out-of-order step).
  size_t rows_allocated() const { return buffers_.size(); }

 private:
  // The node of the tree over [lo, hi); `id` is its place in the tree's
  // postfix order (worker_tree.hpp's program), unique in [0, 2n − 1).
  struct Node {
    int lo = 0, hi = 0;
    size_t id = 0;
  };
  // Leaf w's ancestors, root first, into path_ (depth 0 .. leaf).
  void walk_to(int worker);
  // A free row buffer (allocated on first use, then reused).
  int acquire();

  int workers_ = 0;  // in the whole tree
  int lo_ = 0, hi_ = 0;  // the node this intake sums
  size_t dim_ = 0;
  WireDtype wire_ = WireDtype::kFp32;
  int taken_ = 0;
  int root_buffer_ = -1;
  std::vector<std::vector<float>> buffers_;
  std::vector<int> free_;
  // Complete nodes waiting for their sibling: the buffer holding node id's
  // value, or −1.
  std::vector<int> waiting_;
  std::vector<Node> path_;
};

}  // namespace bitlab
