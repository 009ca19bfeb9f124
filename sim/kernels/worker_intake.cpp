// WorkerTreeIntake: mean_over_workers' tree, one worker's row at a time
// (worker_intake.hpp says why and what it holds).
#include "sim/kernels/worker_intake.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include "sim/kernels/reduce.hpp"
#include "sim/kernels/worker_mean.hpp"

namespace bitlab {
namespace {

// Levels of a tree over at most 2^30 workers, its root included.
constexpr size_t kWorkerTreeDepth = 32;

// Elements a block of the fused pass keeps in a thread's scratch (8 KiB: L1).
constexpr size_t kBlock = 2048;

// dst[i] = wire(src[i]) over n elements (src null: 0), in one pass with the
// finiteness check; returns false when an element is not finite. (v − v is
// 0 for a finite v and NaN for inf and NaN, so the block's sum of them is 0
// exactly when every element is finite.)
template <WireDtype W>
bool wire_block(const float* src, float* dst, size_t n) {
  if (src == nullptr) {
    std::fill(dst, dst + n, 0.0f);
    return true;
  }
  float check = 0.0f;
#pragma omp simd reduction(+ : check)
  for (size_t i = 0; i < n; ++i) {
    const float v = src[i];
    check += v - v;
    if constexpr (W == WireDtype::kFp32) {
      dst[i] = v;
    } else if constexpr (W == WireDtype::kFp16) {
      dst[i] = round_to_half(v);
    } else {
      dst[i] = round_to_bf16(v);
    }
  }
  return check == 0.0f;
}

// One pass over a row: for every element, x = wire(row), then x = c + x for
// each complete node c of `chain` in order (the leaf's sibling first, then
// each ancestor's: the tree's additions, one float add per level), and
// out = x. `out` may be the last node of the chain (each element is read
// before it is written). Returns false when an element is not finite.
template <WireDtype W>
bool fused_row(std::span<const RowPiece> pieces, std::span<const float* const> chain, float* out) {
  bool finite = true;
  for (const RowPiece& p : pieces) {
    const int64_t blocks = static_cast<int64_t>((p.size + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static) reduction(&& : finite) \
    if (static_cast<int64_t>(p.size) > kParallelMinElements)
    for (int64_t b = 0; b < blocks; ++b) {
      alignas(64) float x[kBlock];
      const size_t lo = static_cast<size_t>(b) * kBlock;
      const size_t n = std::min(kBlock, p.size - lo);
      finite = wire_block<W>(p.data == nullptr ? nullptr : p.data + lo, x, n) && finite;
      const size_t at = p.offset + lo;
      for (const float* c : chain) {
        const float* __restrict node = c + at;
#pragma omp simd
        for (size_t i = 0; i < n; ++i) x[i] = node[i] + x[i];
      }
      std::copy(x, x + n, out + at);
    }
  }
  return finite;
}

bool fused_row(std::span<const RowPiece> pieces, std::span<const float* const> chain, float* out,
               WireDtype wire) {
  switch (wire) {
    case WireDtype::kFp16:
      return fused_row<WireDtype::kFp16>(pieces, chain, out);
    case WireDtype::kBf16:
      return fused_row<WireDtype::kBf16>(pieces, chain, out);
    case WireDtype::kFp32:
      break;
  }
  return fused_row<WireDtype::kFp32>(pieces, chain, out);
}

}  // namespace

int64_t first_non_finite(std::span<const RowPiece> pieces) {
  for (const RowPiece& p : pieces) {
    if (p.data == nullptr) continue;
    for (size_t i = 0; i < p.size; ++i) {
      if (!std::isfinite(p.data[i])) return static_cast<int64_t>(p.offset + i);
    }
  }
  return -1;
}

bool gather_row_checked(std::span<const RowPiece> pieces, std::span<float> dst) {
  return fused_row(pieces, {}, dst.data(), WireDtype::kFp32);
}

WorkerTreeIntake::WorkerTreeIntake(int workers, size_t dim, WireDtype wire)
    : WorkerTreeIntake(workers, 0, workers, dim, wire) {}

WorkerTreeIntake::WorkerTreeIntake(int workers, int lo, int hi, size_t dim, WireDtype wire)
    : workers_(workers), lo_(lo), hi_(hi), dim_(dim), wire_(wire) {
  if (workers < 1 || lo < 0 || hi > workers || hi <= lo) {
    throw std::invalid_argument("WorkerTreeIntake: node [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + ") of " + std::to_string(workers) +
                                " workers");
  }
  // A node of the whole tree splits as the whole tree does (lo + (hi − lo)/2
  // at every level below it), so its subtree is the tree over [lo, hi).
  waiting_.assign(2 * static_cast<size_t>(hi - lo) - 1, -1);
  buffers_.reserve(static_cast<size_t>(rows_in_order(hi - lo)));
  path_.reserve(32);
}

int WorkerTreeIntake::rows_in_order(int workers) {
  int levels = 0;
  while ((1 << levels) < workers) ++levels;
  return levels + 1;
}

void WorkerTreeIntake::begin() {
  std::fill(waiting_.begin(), waiting_.end(), -1);
  free_.clear();
  for (size_t b = 0; b < buffers_.size(); ++b) free_.push_back(static_cast<int>(b));
  taken_ = 0;
  root_buffer_ = -1;
}

int WorkerTreeIntake::acquire() {
  if (!free_.empty()) {
    const int b = free_.back();
    free_.pop_back();
    return b;
  }
  buffers_.emplace_back(dim_, 0.0f);
  return static_cast<int>(buffers_.size()) - 1;
}

void WorkerTreeIntake::walk_to(int worker) {
  // Root first, split as mean_over_workers splits (lo + n/2). A subtree over
  // k leaves takes 2k − 1 places of the postfix order, its own the last.
  path_.clear();
  Node node{lo_, hi_, 0};
  node.id = 2 * static_cast<size_t>(hi_ - lo_) - 2;
  size_t start = 0;
  path_.push_back(node);
  while (node.hi - node.lo > 1) {
    const int mid = node.lo + (node.hi - node.lo) / 2;
    const size_t left_places = 2 * static_cast<size_t>(mid - node.lo) - 1;
    if (worker < mid) {
      node = {node.lo, mid, start + left_places - 1};
    } else {
      start += left_places;
      node = {mid, node.hi, start + 2 * static_cast<size_t>(node.hi - mid) - 2};
    }
    path_.push_back(node);
  }
}

bool WorkerTreeIntake::take(int worker, std::span<const RowPiece> pieces) {
  if (worker < lo_ || worker >= hi_) {
    throw std::out_of_range("WorkerTreeIntake::take: worker " + std::to_string(worker));
  }
  walk_to(worker);
  // The sibling of path_[i] (i ≥ 1): the other child of path_[i − 1].
  const auto sibling_id = [&](size_t i) {
    const Node& parent = path_[i - 1];
    const Node& child = path_[i];
    const int mid = parent.lo + (parent.hi - parent.lo) / 2;
    const size_t left_places = 2 * static_cast<size_t>(mid - parent.lo) - 1;
    const size_t parent_start = parent.id + 1 - (2 * static_cast<size_t>(parent.hi - parent.lo) - 1);
    return child.lo == parent.lo
               ? parent_start + left_places + 2 * static_cast<size_t>(parent.hi - mid) - 2
               : parent_start + left_places - 1;
  };
  // The complete nodes this row completes the tree with, bottom up: the
  // leaf's sibling, then each ancestor's sibling while it is complete. One
  // fused pass adds the row and them (fused_row); the topmost node's buffer
  // takes the result, the others are freed.
  size_t i = path_.size() - 1;
  int chain_buffers[kWorkerTreeDepth];
  const float* chain[kWorkerTreeDepth];
  size_t links = 0;
  while (i > 0) {
    const size_t s = sibling_id(i);
    if (waiting_[s] < 0) break;
    chain_buffers[links] = std::exchange(waiting_[s], -1);
    chain[links] = buffers_[static_cast<size_t>(chain_buffers[links])].data();
    ++links;
    --i;
  }
  const int buffer = links > 0 ? chain_buffers[links - 1] : acquire();
  const bool finite =
      fused_row(pieces, {chain, links}, buffers_[static_cast<size_t>(buffer)].data(), wire_);
  for (size_t k = 0; k + 1 < links; ++k) free_.push_back(chain_buffers[k]);
  if (i == 0) {
    root_buffer_ = buffer;
  } else {
    waiting_[path_[i].id] = buffer;
  }
  ++taken_;
  return finite;
}

std::span<const float> WorkerTreeIntake::root() const {
  if (taken_ != hi_ - lo_ || root_buffer_ < 0) {
    throw std::logic_error("WorkerTreeIntake: " + std::to_string(taken_) + " of " +
                           std::to_string(hi_ - lo_) + " rows taken");
  }
  return buffers_[static_cast<size_t>(root_buffer_)];
}

void WorkerTreeIntake::finish(std::span<float> out) const {
  if (lo_ != 0 || hi_ != workers_) {
    throw std::logic_error("WorkerTreeIntake::finish: a node's intake has no mean (root())");
  }
  // mean_over_workers' last operation: wire(root / float(n)).
  finish_mean(root(), {}, workers_, out, wire_);
}

}  // namespace bitlab
