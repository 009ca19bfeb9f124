// LoCo's two-stage quantized exchange; see loco_exchange.hpp.
#include "sim/collectives/loco_exchange.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "sim/compress/quantize.hpp"
#include "sim/core/rng.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

namespace {

QuantizeSpec group_spec(int bits, size_t group, bool stochastic) {
  QuantizeSpec s;
  s.bits = bits;
  s.group_size = group;
  s.stochastic = stochastic;
  s.fp16_scale = false;  // the reference stores fp32 scales (quantize::Params::store)
  return s;
}

int64_t code_bytes(size_t elements, int bits) {
  return static_cast<int64_t>((elements * static_cast<size_t>(bits) + 7) / 8);
}

// Elements per group of a compressed tensor (see the header's "Groups").
size_t group_elements(const TensorInfo& t, size_t partition, int n) {
  const size_t wanted = std::max({t.rows, t.cols, static_cast<size_t>(n)});
  size_t k = (wanted + static_cast<size_t>(n) - 1) / static_cast<size_t>(n);
  while (partition % k != 0) ++k;  // terminates: k = partition divides it
  return partition / k;
}

}  // namespace

std::vector<TensorInfo> LocoTwoStageExchange::tensors_or_square(std::vector<TensorInfo> tensors,
                                                                size_t dim) {
  if (tensors.empty()) tensors.push_back(square_tensor("params", 0, dim));
  return tensors;
}

std::vector<LocoTensorPlan> LocoTwoStageExchange::layout(const std::vector<TensorInfo>& tensors,
                                                         int n, int node_size) {
  const int g = node_size <= 0 ? n : node_size;
  if (n % g != 0) throw std::invalid_argument("LoCo: node size does not divide the workers");
  const bool multi_node = n / g > 1;
  std::vector<LocoTensorPlan> plans;
  size_t offset = 0, stage2 = 0;
  for (const TensorInfo& t : tensors) {
    if (t.offset != offset) throw std::invalid_argument("LoCo: tensors do not tile the vector");
    LocoTensorPlan p;
    p.offset = t.offset;
    p.size = t.size;
    // all_to_all_loco_quant_reduce: 1-D tensors and sizes not divisible by
    // 2·world fall back to reduce_scatter_coalesced; one node never quantizes
    // (__avg_scatter_grads).
    p.compressed = multi_node && !t.one_dimensional() && t.size > 0 &&
                   t.size % (2 * static_cast<size_t>(n)) == 0;
    if (p.compressed) {
      p.partition = t.size / static_cast<size_t>(n);
      p.group = group_elements(t, p.partition, n);
      p.stage2_offset = stage2;
      stage2 += t.size / static_cast<size_t>(g);
    }
    plans.push_back(p);
    offset += t.size;
  }
  return plans;
}

std::vector<CommRecord> LocoTwoStageExchange::plan(const std::vector<TensorInfo>& tensors, int n,
                                                   int node_size, int bits, WireDtype wire) {
  const int g = node_size <= 0 ? n : node_size, nodes = n / g;
  const int64_t wb = wire_dtype_bytes(wire);
  const char* codes = intern_dtype_name("int" + std::to_string(bits));
  const char* wname = wire_dtype_name(wire);
  const std::vector<LocoTensorPlan> plans = layout(tensors, n, g);
  std::vector<CommRecord> out;
  auto alltoall = [&](const char* dtype, const char* scope, int p, int groups, int64_t s) {
    out.push_back(make_comm_record("alltoall", "pairwise", dtype, scope, p, groups, s,
                                   pairwise_alltoall_cost(p, s)));
  };
  auto reduce_scatter = [&](int64_t padded_elements) {
    const int64_t s = padded_elements * wb;
    out.push_back(make_comm_record("reduce_scatter", "ring", wname, "all", n, 1, s,
                                   ring_allgather_cost(n, s)));
  };
  // reduce_scatter_coalesced pads every tensor to a multiple of the world.
  auto padded = [&](size_t size) {
    return static_cast<int64_t>((size + static_cast<size_t>(n) - 1) / static_cast<size_t>(n)) * n;
  };
  size_t dim = 0;
  if (nodes <= 1) {
    // One node: one coalesced full-precision reduce-scatter of every tensor.
    int64_t total = 0;
    for (const auto& p : plans) total += padded(p.size);
    reduce_scatter(total);
  }
  for (const auto& p : plans) {
    dim += p.size;
    if (nodes <= 1) continue;
    if (!p.compressed) {
      reduce_scatter(padded(p.size));
      continue;
    }
    const int64_t groups = static_cast<int64_t>(p.size / p.group);
    alltoall(codes, "intra", g, nodes, code_bytes(p.size, bits));
    alltoall("fp32", "intra", g, nodes, 4 * groups);
    alltoall(codes, "inter", nodes, g, code_bytes(p.size / static_cast<size_t>(g), bits));
    alltoall("fp32", "inter", nodes, g, 4 * groups / g);
  }
  // bitlab's completion: every worker needs the whole mean (no ZeRO-3).
  const int64_t s = static_cast<int64_t>(dim) * wb;
  out.push_back(
      make_comm_record("allgather", "ring", wname, "all", n, 1, s, ring_allgather_cost(n, s)));
  return out;
}

LocoTwoStageExchange::LocoTwoStageExchange(int workers, size_t dim, std::vector<TensorInfo> tensors,
                                           int node_size, const LocoExchangeOptions& options)
    : n_(workers), g_(node_size <= 0 ? workers : node_size), nodes_(0), dim_(dim), opts_(options) {
  tensors = tensors_or_square(std::move(tensors), dim);
  plans_ = layout(tensors, n_, g_);
  nodes_ = n_ / g_;
  size_t covered = 0;
  for (const auto& p : plans_) {
    covered += p.size;
    if (p.compressed) {
      ++compressed_tensors_;
      stage2_len_ += p.size / static_cast<size_t>(g_);
    }
  }
  if (covered != dim_) throw std::invalid_argument("LoCo: tensors do not cover the vector");
  records_ = plan(tensors, n_, g_, opts_.bits, opts_.wire);
  started_.assign(plans_.size(), 0);
  reset_now_.assign(plans_.size(), 0);
  const size_t rows = static_cast<size_t>(n_);
  q1_.assign(rows * dim_, 0.0f);
  e1_.assign(rows * dim_, 0.0f);
  q2_.assign(rows * stage2_len_, 0.0f);
  e2_.assign(rows * stage2_len_, 0.0f);
}

// The reference's counter (all_to_all_loco_quant_reduce's loco_idx), decided
// for every compressed tensor of this call in order, then applied.
void LocoTwoStageExchange::apply_resets() {
  for (size_t t = 0; t < plans_.size(); ++t) {
    reset_now_[t] = 0;
    if (!plans_[t].compressed) continue;
    if (!started_[t] || (opts_.reset_T > 0 && counter_ > opts_.reset_T)) {
      reset_now_[t] = 1;
      started_[t] = 1;
      counter_ = 0;
    }
    ++counter_;
  }
#pragma omp parallel for schedule(static) if (n_ > 1)
  for (int w = 0; w < n_; ++w) {
    for (size_t t = 0; t < plans_.size(); ++t) {
      if (!reset_now_[t]) continue;
      const LocoTensorPlan& p = plans_[t];
      float* e1 = e1_.data() + static_cast<size_t>(w) * dim_ + p.offset;
      std::fill(e1, e1 + p.size, 0.0f);
      float* e2 = e2_.data() + static_cast<size_t>(w) * stage2_len_ + p.stage2_offset;
      std::fill(e2, e2 + p.size / static_cast<size_t>(g_), 0.0f);
    }
  }
}

namespace {

// q = Q_b(h) and the error e = β e + (1−β)(h − q), stored Q_8 when asked:
// one stage of loco_swizzled_quant_kernel / loco_dequant_reduce for one
// tensor's row, followed by the reference's quantize(err, groups, 8).
void quantize_with_error(std::span<const float> h, float* q, float* e, size_t group,
                         const LocoExchangeOptions& o, const RngStream& rng, uint64_t first) {
  const size_t len = h.size();
  quantize_dequantize(h, {q, len}, group_spec(o.bits, group, o.stochastic), rng, first);
  cpu::ema_error_update(e, h.data(), q, len, o.err_beta);
  if (o.storage_bits == 8) {
    quantize_dequantize({e, len}, {e, len}, group_spec(8, group, false), rng, 0);
  }
}

}  // namespace

void LocoTwoStageExchange::stage1(const WorkerBuffers& grads, uint64_t seed, int64_t step) {
#pragma omp parallel for schedule(dynamic, 1) if (n_ > 1)
  for (int w = 0; w < n_; ++w) {
    thread_local std::vector<float> h;
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(w),
                        static_cast<uint64_t>(step));
    for (const LocoTensorPlan& p : plans_) {
      if (!p.compressed) continue;
      const size_t row = static_cast<size_t>(w) * dim_ + p.offset;
      const float* gr = grads[w].data() + p.offset;
      float* e = e1_.data() + row;
      h.resize(p.size);
      for (size_t k = 0; k < p.size; ++k) h[k] = gr[k] + e[k];  // compensate
      quantize_with_error(h, q1_.data() + row, e, p.group, opts_, rng, p.offset);
    }
  }
}

void LocoTwoStageExchange::stage2(uint64_t seed, int64_t step) {
  const size_t g = static_cast<size_t>(g_);
#pragma omp parallel for schedule(dynamic, 1) if (n_ > 1)
  for (int w = 0; w < n_; ++w) {
    thread_local std::vector<float> h;
    const size_t node = static_cast<size_t>(w) / g, b = static_cast<size_t>(w) % g;
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(n_ + w),
                        static_cast<uint64_t>(step));
    for (const LocoTensorPlan& p : plans_) {
      if (!p.compressed) continue;
      const size_t len = p.size / g, P = p.partition;
      const size_t row = static_cast<size_t>(w) * stage2_len_ + p.stage2_offset;
      float* e = e2_.data() + row;
      h.resize(len);
      // Partition z = a·g + b of every node a, from the node's g workers in order.
      for (size_t a = 0; a < static_cast<size_t>(nodes_); ++a) {
        const size_t src = p.offset + (a * g + b) * P;
        for (size_t k = 0; k < P; ++k) {
          float s = 0.0f;
          for (size_t j = 0; j < g; ++j) s += q1_[(node * g + j) * dim_ + src + k];
          if (!opts_.node_sum) s /= static_cast<float>(g_);
          h[a * P + k] = s + e[a * P + k];
        }
      }
      quantize_with_error(h, q2_.data() + row, e, p.group, opts_, rng, p.stage2_offset);
    }
  }
}

void LocoTwoStageExchange::finish(const WorkerBuffers& grads, std::span<float> out) {
  const size_t g = static_cast<size_t>(g_), nodes = static_cast<size_t>(nodes_);
  for (const LocoTensorPlan& p : plans_) {
    std::span<float> o = out.subspan(p.offset, p.size);
    if (!p.compressed) {
      const WorkerBuffers slice{grads.data + p.offset, grads.stride, p.size, n_};
      mean_over_workers(slice, o, opts_.wire);
      continue;
    }
    const size_t P = p.partition;
#pragma omp parallel for schedule(static) if (p.size > 65536)
    for (int z = 0; z < n_; ++z) {
      const size_t a = static_cast<size_t>(z) / g, b = static_cast<size_t>(z) % g;
      for (size_t k = 0; k < P; ++k) {
        float s = 0.0f;
        for (size_t i = 0; i < nodes; ++i) {
          s += q2_[(i * g + b) * stage2_len_ + p.stage2_offset + a * P + k];
        }
        o[static_cast<size_t>(z) * P + k] = s / static_cast<float>(nodes_);
      }
    }
    round_to_wire(o, opts_.wire);  // the completing allgather's precision
  }
}

void LocoTwoStageExchange::run(Communicator& comm, const WorkerBuffers& grads, std::span<float> out,
                               uint64_t seed, int64_t step) {
  if (comm.distributed()) {
    throw std::logic_error("LocoTwoStageExchange: simulator only (the MPI backend refuses it)");
  }
  if (nodes_ > 1) {
    apply_resets();
    stage1(grads, seed, step);
    stage2(seed, step);
  }
  finish(grads, out);
  for (const CommRecord& r : records_) comm.record(r);
}

void LocoTwoStageExchange::serialize(StateArchive& io) {
  io.field("loco_exchange.started", started_);
  io.field("loco_exchange.counter", counter_);
  io.field("loco_exchange.e1", e1_);
  io.field("loco_exchange.e2", e2_);
  io.field("loco_exchange.q1", q1_);
  io.field("loco_exchange.q2", q2_);
}

}  // namespace bitlab
