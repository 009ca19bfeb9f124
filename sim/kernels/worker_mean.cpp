// The mean over workers whose bits every result depends on: the fixed
// pairwise tree of mean_over_workers (worker_mean.hpp), its pieces for a
// caller that builds the tree in parts, the streamed form for rows not all
// held at once, and the same tree over doubles. Plain arithmetic, no
// communication: the Communicator (sim/comm/comm.cpp) calls it and counts the
// bytes.
#include "sim/kernels/worker_mean.hpp"

#include <algorithm>
#include <vector>

namespace bitlab {
namespace {

constexpr size_t kChunk = 2048;  // elements per reduction chunk (fits L1 with scratch)

template <WireDtype W>
inline float to_wire(float v) {
  if constexpr (W == WireDtype::kFp16) return round_to_half(v);
  if constexpr (W == WireDtype::kBf16) return round_to_bf16(v);
  return v;
}

// Calls f.template operator()<W>() for the run-time wire type: one switch for
// every function templated on it.
template <class F>
void with_wire(WireDtype wire, F&& f) {
  switch (wire) {
    case WireDtype::kFp32:
      f.template operator()<WireDtype::kFp32>();
      break;
    case WireDtype::kFp16:
      f.template operator()<WireDtype::kFp16>();
      break;
    case WireDtype::kBf16:
      f.template operator()<WireDtype::kBf16>();
      break;
  }
}

// out[0..len) = sum over workers [lo, hi) of the wire-rounded inputs at
// element offset `off`, as a fixed pairwise tree: split at lo + (hi-lo)/2.
template <WireDtype W>
void tree_sum(const WorkerBuffers& in, int lo, int hi, size_t off, size_t len, float* out,
              float* scratch) {
  const int n = hi - lo;
  if (n == 1) {
    const float* a = in.data + static_cast<size_t>(lo) * in.stride + off;
    for (size_t k = 0; k < len; ++k) out[k] = to_wire<W>(a[k]);
    return;
  }
  if (n == 2) {
    const float* a = in.data + static_cast<size_t>(lo) * in.stride + off;
    const float* b = a + in.stride;
#pragma omp simd
    for (size_t k = 0; k < len; ++k) out[k] = to_wire<W>(a[k]) + to_wire<W>(b[k]);
    return;
  }
  const int mid = lo + n / 2;
  tree_sum<W>(in, lo, mid, off, len, out, scratch + kChunk);
  tree_sum<W>(in, mid, hi, off, len, scratch, scratch + kChunk);
#pragma omp simd
  for (size_t k = 0; k < len; ++k) out[k] += scratch[k];
}

// tree_sum's scratch for `n` rows on this thread: one chunk per tree level,
// grown once per thread, reused.
float* tree_scratch(int n) {
  int depth = 1;
  while ((1 << (depth - 1)) < n) ++depth;
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(depth + 1) * kChunk)
    scratch.resize(static_cast<size_t>(depth + 1) * kChunk);
  return scratch.data();
}

template <WireDtype W>
void mean_impl(const WorkerBuffers& in, std::span<float> out) {
  const size_t len = in.len;
  const int n = in.count;
  const float inv_check = static_cast<float>(n);
  const int64_t chunks = static_cast<int64_t>((len + kChunk - 1) / kChunk);
#pragma omp parallel
  {
    float* const scratch = tree_scratch(n);
#pragma omp for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t off = static_cast<size_t>(c) * kChunk;
      const size_t m = std::min(kChunk, len - off);
      float* o = out.data() + off;
      tree_sum<W>(in, 0, n, off, m, o, scratch);
#pragma omp simd
      for (size_t k = 0; k < m; ++k) o[k] = to_wire<W>(o[k] / inv_check);
    }
  }
}

// The tree's node over every row of `in`, chunk by chunk on this thread.
template <WireDtype W>
void sum_impl(const WorkerBuffers& in, float* out) {
  float* const scratch = tree_scratch(in.count);
  for (size_t off = 0; off < in.len; off += kChunk) {
    tree_sum<W>(in, 0, in.count, off, std::min(kChunk, in.len - off), out + off, scratch);
  }
}

template <WireDtype W>
void finish_impl(const float* left, const float* right, int n, float* out, size_t len) {
  const float count = static_cast<float>(n);
  const int64_t m = static_cast<int64_t>(len);
  if (right == nullptr) {
#pragma omp parallel for simd schedule(static) if (m > 4 * static_cast <int64_t>(kChunk))
    for (int64_t k = 0; k < m; ++k) out[k] = to_wire<W>(left[k] / count);
    return;
  }
#pragma omp parallel for simd schedule(static) if (m > 4 * static_cast <int64_t>(kChunk))
  for (int64_t k = 0; k < m; ++k) out[k] = to_wire<W>((left[k] + right[k]) / count);
}

}  // namespace

void sum_over_workers(const WorkerBuffers& in, std::span<float> out, WireDtype wire) {
  with_wire(wire, [&]<WireDtype W>() { sum_impl<W>(in, out.data()); });
}

void finish_mean(std::span<const float> left, std::span<const float> right, int n,
                 std::span<float> out, WireDtype wire) {
  const float* r = right.empty() ? nullptr : right.data();
  with_wire(wire,
            [&]<WireDtype W>() { finish_impl<W>(left.data(), r, n, out.data(), out.size()); });
}

void mean_over_workers(const WorkerBuffers& in, std::span<float> out, WireDtype wire) {
  with_wire(wire, [&]<WireDtype W>() { mean_impl<W>(in, out); });
}

static double tree_sum_d(std::span<const double> v) {
  if (v.size() == 1) return v[0];
  const size_t mid = v.size() / 2;
  return tree_sum_d(v.first(mid)) + tree_sum_d(v.subspan(mid));
}

double tree_mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return tree_sum_d(values) / static_cast<double>(values.size());
}

namespace {


// sum of rows [lo, hi) into out, split as tree_sum splits (lo + n/2); the
// right half's partial sum goes to scratch[0], deeper levels further on.
void streamed_sum(int lo, int hi, size_t len, FunctionRef<void(int, std::span<float>)> fill,
                  float* out, float* scratch) {
  if (hi - lo == 1) {
    fill(lo, {out, len});
    return;
  }
  const int mid = lo + (hi - lo) / 2;
  streamed_sum(lo, mid, len, fill, out, scratch);
  streamed_sum(mid, hi, len, fill, scratch, scratch + len);
  const int64_t m = static_cast<int64_t>(len);
#pragma omp parallel for simd schedule(static) if (m > 4 * static_cast <int64_t>(kChunk))
  for (int64_t k = 0; k < m; ++k) out[k] += scratch[k];
}

}  // namespace

void streamed_mean(int n, size_t len, FunctionRef<void(int, std::span<float>)> fill,
                   std::span<float> out, std::vector<float>& scratch) {
  int levels = 0;
  while ((1 << levels) < n) ++levels;
  if (scratch.size() < static_cast<size_t>(levels) * len) {
    scratch.resize(static_cast<size_t>(levels) * len);
  }
  streamed_sum(0, n, len, fill, out.data(), scratch.data());
  const float count = static_cast<float>(n);
  const int64_t m = static_cast<int64_t>(len);
#pragma omp parallel for simd schedule(static) if (m > 4 * static_cast <int64_t>(kChunk))
  for (int64_t k = 0; k < m; ++k) out[k] = out[k] / count;  // as mean_impl: o / float(n)
}

}  // namespace bitlab
