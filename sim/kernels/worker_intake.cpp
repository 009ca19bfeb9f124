// WorkerTreeIntake: mean_over_workers' tree, one worker's row at a time
// (worker_intake.hpp says why and what it holds).
#include "sim/kernels/worker_intake.hpp"

#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <algorithm>

#include "sim/kernels/reduce.hpp"

namespace bitlab {
namespace {

inline float to_wire(float v, WireDtype wire) {
  switch (wire) {
    case WireDtype::kFp16:
      return round_to_half(v);
    case WireDtype::kBf16:
      return round_to_bf16(v);
    case WireDtype::kFp32:
      break;
  }
  return v;
}

// dst[i] = wire(src[i]) (kAdd: dst[i] += wire(src[i])) over n elements, in
// one pass with the finiteness check (x − x ≠ 0 for inf and NaN). Elementwise,
// so splitting it over threads leaves the bits alone.
template <bool kAdd>
bool piece_pass(const float* src, float* dst, size_t n, WireDtype wire) {
  const int64_t m = static_cast<int64_t>(n);
  bool finite = true;
  const auto run = [&]<WireDtype W>() {
#pragma omp parallel for simd schedule(static) reduction(&& : finite) if (m > kParallelMinElements)
    for (int64_t i = 0; i < m; ++i) {
      const float v = src[i];
      finite = finite && (v - v) == 0.0f;
      const float w = W == WireDtype::kFp32   ? v
                      : W == WireDtype::kFp16 ? round_to_half(v)
                                              : round_to_bf16(v);
      if constexpr (kAdd) {
        dst[i] += w;
      } else {
        dst[i] = w;
      }
    }
  };
  switch (wire) {
    case WireDtype::kFp32:
      run.template operator()<WireDtype::kFp32>();
      break;
    case WireDtype::kFp16:
      run.template operator()<WireDtype::kFp16>();
      break;
    case WireDtype::kBf16:
      run.template operator()<WireDtype::kBf16>();
      break;
  }
  return finite;
}

// Every piece of a row through piece_pass; zero pieces give wire(0) = 0.
template <bool kAdd>
bool row_pass(std::span<const RowPiece> pieces, float* dst, WireDtype wire) {
  bool finite = true;
  for (const RowPiece& p : pieces) {
    if (p.data != nullptr) {
      finite &= piece_pass<kAdd>(p.data, dst + p.offset, p.size, wire);
    } else if (!kAdd) {
      std::fill(dst + p.offset, dst + p.offset + p.size, 0.0f);
    }
  }
  return finite;
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
  return row_pass<false>(pieces, dst.data(), WireDtype::kFp32);
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
  size_t i = path_.size() - 1;
  int buffer = -1;
  bool finite = true;
  // The leaf: into its complete sibling (the parent's value), or a node of its own.
  if (i > 0 && waiting_[sibling_id(i)] >= 0) {
    buffer = std::exchange(waiting_[sibling_id(i)], -1);
    finite = row_pass<true>(pieces, buffers_[static_cast<size_t>(buffer)].data(), wire_);
    --i;
  } else {
    buffer = acquire();
    finite = row_pass<false>(pieces, buffers_[static_cast<size_t>(buffer)].data(), wire_);
  }
  // Up the tree while the sibling is complete: sibling += node.
  while (i > 0) {
    const size_t s = sibling_id(i);
    if (waiting_[s] < 0) break;
    const int into = std::exchange(waiting_[s], -1);
    float* __restrict dst = buffers_[static_cast<size_t>(into)].data();
    const float* __restrict src = buffers_[static_cast<size_t>(buffer)].data();
    const int64_t m = static_cast<int64_t>(dim_);
#pragma omp parallel for simd schedule(static) if (m > kParallelMinElements)
    for (int64_t k = 0; k < m; ++k) dst[k] += src[k];
    free_.push_back(buffer);
    buffer = into;
    --i;
  }
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
  (void)root();
  // As mean_impl: wire(sum / float(n)).
  const float count = static_cast<float>(workers_);
  const float* root = buffers_[static_cast<size_t>(root_buffer_)].data();
  const int64_t m = static_cast<int64_t>(dim_);
  const WireDtype wire = wire_;
#pragma omp parallel for simd schedule(static) if (m > kParallelMinElements)
  for (int64_t k = 0; k < m; ++k) out[k] = to_wire(root[k] / count, wire);
}

}  // namespace bitlab
