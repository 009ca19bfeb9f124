// LoCo's two-stage quantized exchange; see loco_exchange.hpp.
#include "sim/collectives/loco_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "sim/collectives/rank_messages.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/float16.hpp"
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
                                           int node_size, const LocoExchangeOptions& options,
                                           WorkerRange local)
    : n_(workers),
      g_(node_size <= 0 ? workers : node_size),
      nodes_(0),
      local_(local.size() > 0 ? local : WorkerRange{0, workers}),
      dim_(dim),
      opts_(options) {
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
  const size_t rows = static_cast<size_t>(local_.size());
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
#pragma omp parallel for schedule(static) if (local_.size() > 1)
  for (int w = local_.begin; w < local_.end; ++w) {
    for (size_t t = 0; t < plans_.size(); ++t) {
      if (!reset_now_[t]) continue;
      const LocoTensorPlan& p = plans_[t];
      float* e1 = e1_.data() + row1(w) + p.offset;
      std::fill(e1, e1 + p.size, 0.0f);
      float* e2 = e2_.data() + row2(w) + p.stage2_offset;
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

// The wire image of one partition (P elements, whole groups): its b-bit codes
// then its groups' fp32 scales, drawn as quantize_dequantize drew them
// (element k of the partition from block first + k).
int64_t partition_bytes(const LocoTensorPlan& p, int bits) {
  return quantize_wire_bytes(p.partition, group_spec(bits, p.group, false));
}

void encode_partition(const float* h, const LocoTensorPlan& p, const LocoExchangeOptions& o,
                      const RngStream& rng, uint64_t first, uint8_t* dst) {
  const QuantizeSpec spec = group_spec(o.bits, p.group, o.stochastic);
  quantize_encode({h, p.partition}, {dst, static_cast<size_t>(partition_bytes(p, o.bits))}, spec,
                  rng, first);
}

// One worker's images of a stage: `parts` partitions of every compressed
// tensor, tensor-major (stage 1: the n partitions; stage 2: the node parts).
size_t stage_image_bytes(const std::vector<LocoTensorPlan>& plans, int parts, int bits) {
  size_t bytes = 0;
  for (const LocoTensorPlan& p : plans) {
    if (p.compressed) bytes += static_cast<size_t>(parts * partition_bytes(p, bits));
  }
  return bytes;
}

void decode_partition(const uint8_t* src, const LocoTensorPlan& p, int bits, float* out) {
  const QuantizeSpec spec = group_spec(bits, p.group, false);
  quantize_decode({src, static_cast<size_t>(partition_bytes(p, bits))}, {out, p.partition}, spec);
}

}  // namespace

void LocoTwoStageExchange::stage1(const WorkerBuffers& grads, uint64_t seed, int64_t step) {
  // Across ranks each partition's image is kept for the intra-node all-to-all.
  const size_t image = stage_image_bytes(plans_, n_, opts_.bits);
  if (distributed()) image1_.resize(image * static_cast<size_t>(local_.size()));
#pragma omp parallel for schedule(dynamic, 1) if (local_.size() > 1)
  for (int w = local_.begin; w < local_.end; ++w) {
    thread_local std::vector<float> h;
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(w),
                        static_cast<uint64_t>(step));
    uint8_t* img =
        distributed() ? image1_.data() + static_cast<size_t>(w - local_.begin) * image : nullptr;
    for (const LocoTensorPlan& p : plans_) {
      if (!p.compressed) continue;
      const size_t row = row1(w) + p.offset;
      const float* gr = grads[w].data() + p.offset;
      float* e = e1_.data() + row;
      h.resize(p.size);
      for (size_t k = 0; k < p.size; ++k) h[k] = gr[k] + e[k];  // compensate
      quantize_with_error(h, q1_.data() + row, e, p.group, opts_, rng, p.offset);
      if (img == nullptr) continue;
      const int64_t unit = partition_bytes(p, opts_.bits);
      for (int z = 0; z < n_; ++z, img += unit) {
        encode_partition(h.data() + static_cast<size_t>(z) * p.partition, p, opts_, rng,
                         p.offset + static_cast<size_t>(z) * p.partition, img);
      }
    }
  }
}

void LocoTwoStageExchange::stage2(uint64_t seed, int64_t step) {
  const size_t g = static_cast<size_t>(g_);
  const size_t image = stage_image_bytes(plans_, nodes_, opts_.bits);
  if (distributed()) image2_.resize(image * static_cast<size_t>(local_.size()));
#pragma omp parallel for schedule(dynamic, 1) if (local_.size() > 1)
  for (int w = local_.begin; w < local_.end; ++w) {
    thread_local std::vector<float> h;
    thread_local std::vector<const float*> from;
    const size_t node = static_cast<size_t>(w) / g, b = static_cast<size_t>(w) % g;
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(n_ + w),
                        static_cast<uint64_t>(step));
    const size_t wrow = static_cast<size_t>(w - local_.begin);
    uint8_t* img = distributed() ? image2_.data() + wrow * image : nullptr;
    from.resize(g);
    for (const LocoTensorPlan& p : plans_) {
      if (!p.compressed) continue;
      const size_t len = p.size / g, P = p.partition;
      const size_t row = row2(w) + p.stage2_offset;
      float* e = e2_.data() + row;
      h.resize(len);
      // Partition z = a·g + b of every node a, from the node's g workers in
      // order: their q1 rows where held, else what the all-to-all brought.
      for (size_t a = 0; a < static_cast<size_t>(nodes_); ++a) {
        for (size_t j = 0; j < g; ++j) {
          const int src = static_cast<int>(node * g + j);
          from[j] = src >= local_.begin && src < local_.end
                        ? q1_.data() + row1(src) + p.offset + (a * g + b) * P
                        : in2_.data() + (wrow * g + j) * stage2_len_ + p.stage2_offset + a * P;
        }
        for (size_t k = 0; k < P; ++k) {
          float s = 0.0f;
          for (size_t j = 0; j < g; ++j) s += from[j][k];
          if (!opts_.node_sum) s /= static_cast<float>(g_);
          h[a * P + k] = s + e[a * P + k];
        }
      }
      quantize_with_error(h, q2_.data() + row, e, p.group, opts_, rng, p.stage2_offset);
      if (img == nullptr) continue;
      const int64_t unit = partition_bytes(p, opts_.bits);
      for (size_t a = 0; a < static_cast<size_t>(nodes_); ++a, img += unit) {
        encode_partition(h.data() + a * P, p, opts_, rng, p.stage2_offset + a * P, img);
      }
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

// ---------------------------------------------------------------------------
// Across ranks.

// A stage's communicator: world rank r is rank (r / div) % mod of `t`; a
// null `t`: every message of the stage stays on its rank.
struct LocoTwoStageExchange::Route {
  Transport* t = nullptr;
  int div = 1, mod = 1 << 30;
  int rank_of(int world_rank) const { return world_rank / div % mod; }
};

// DeepSpeed's groups (_get_local_all_to_all_group): "local_i" the ranks of
// node i, "global_j" local rank j of every node. Here a rank holds b workers:
// when b divides g, node k's g/b ranks form its intra-node communicator and
// the ranks at the same place in every node an inter-node one (split once,
// at the first compressed call, by every rank); when g divides b the node
// lies on one rank (nothing crosses ranks inside a node) and the inter-node
// stage spans every rank; otherwise both stages run over every rank.
LocoTwoStageExchange::Route LocoTwoStageExchange::route(Communicator& comm, bool intra) {
  const int b = local_.size(), r = comm.rank();
  if (g_ % b == 0) {
    const int per = g_ / b;  // ranks per node
    if (per > 1 && !split_) {
      split_ = true;
      intra_ = comm.transport().split(r / per, r);  // local_<node>, in rank order
      inter_ = comm.transport().split(r % per, r);  // global_<place>, node order
    }
    if (intra) return per > 1 ? Route{intra_.get(), 1, per} : Route{};
    return per > 1 ? Route{inter_.get(), per} : Route{&comm.transport()};
  }
  if (b % g_ == 0 && intra) return Route{};
  return Route{&comm.transport()};
}

// One stage's all-to-all of partition images, worker to worker: intra (stage
// 1), worker s sends worker d of its node the partitions a·g + (d mod g) of
// every node a, every compressed tensor in order; inter (stage 2), worker s
// sends worker d at the same place of node a = d / g the part a of its q2
// row. Messages for a worker on the same rank are not sent (the receiver
// reads the sender's rows). Each rank's block for rank q holds its messages
// source-major, then by destination; the receiver decodes them in that
// order into in2_ (row d, slot j = s mod g) or in3_ (row d, slot s / g).
void LocoTwoStageExchange::exchange(Communicator& comm, bool intra) {
  const Route rt = route(comm, intra);
  if (rt.t == nullptr) return;
  const int g = g_, b = local_.size();
  const auto linked = [&](int s, int d) { return intra ? s / g == d / g : s % g == d % g; };
  const auto mine = [&](int w) { return w >= local_.begin && w < local_.end; };
  int64_t unit = 0;  // one message: every compressed tensor's share
  size_t slot_len = 0;
  for (const LocoTensorPlan& p : plans_) {
    if (!p.compressed) continue;
    unit += (intra ? nodes_ : 1) * partition_bytes(p, opts_.bits);
    slot_len += intra ? p.size / static_cast<size_t>(g) : p.partition;
  }
  const size_t image = intra ? image1_.size() / b : image2_.size() / b;
  const int ranks = rt.t->ranks();
  for (auto* v : {&counts_, &displs_, &rcounts_, &rdispls_}) v->assign(ranks, 0);
  for (int s = 0; s < n_; ++s) {
    for (int d = 0; d < n_; ++d) {
      if (mine(s) == mine(d) || !linked(s, d)) continue;
      if (mine(s)) counts_[rt.rank_of(d / b)] += unit;
      if (mine(d)) rcounts_[rt.rank_of(s / b)] += unit;
    }
  }
  for (int q = 1; q < ranks; ++q) {
    displs_[q] = displs_[q - 1] + counts_[q - 1];
    rdispls_[q] = rdispls_[q - 1] + rcounts_[q - 1];
  }
  send_.resize(static_cast<size_t>(displs_[ranks - 1] + counts_[ranks - 1]));
  recv_.resize(static_cast<size_t>(rdispls_[ranks - 1] + rcounts_[ranks - 1]));
  std::vector<int64_t>& at = cursor_;  // where the next message for / from rank q goes
  at = displs_;
  for (int s = local_.begin; s < local_.end; ++s) {
    const uint8_t* img = (intra ? image1_.data() : image2_.data()) +
                         static_cast<size_t>(s - local_.begin) * image;
    for (int d = 0; d < n_; ++d) {
      if (mine(d) || !linked(s, d)) continue;
      uint8_t* dst = send_.data() + at[rt.rank_of(d / b)];
      at[rt.rank_of(d / b)] += unit;
      // The image is tensor-major; each tensor's partitions (intra: z of n,
      // inter: part a of nodes) in order.
      const uint8_t* src = img;
      for (const LocoTensorPlan& p : plans_) {
        if (!p.compressed) continue;
        const int64_t u = partition_bytes(p, opts_.bits);
        if (intra) {
          for (int a = 0; a < nodes_; ++a, dst += u) {
            std::copy_n(src + (a * g + d % g) * u, u, dst);
          }
          src += n_ * u;
        } else {
          std::copy_n(src + (d / g) * u, u, dst);
          dst += u;
          src += nodes_ * u;
        }
      }
    }
  }
  rt.t->alltoallv(send_.data(), counts_, displs_, recv_.data(), rcounts_, rdispls_);
  std::vector<float>& in = intra ? in2_ : in3_;
  const size_t slots = static_cast<size_t>(intra ? g : nodes_);
  in.resize(static_cast<size_t>(b) * slots * slot_len);
  at = rdispls_;
  for (int s = 0; s < n_; ++s) {
    if (mine(s)) continue;
    for (int d = local_.begin; d < local_.end; ++d) {
      if (!linked(s, d)) continue;
      const uint8_t* src = recv_.data() + at[rt.rank_of(s / b)];
      at[rt.rank_of(s / b)] += unit;
      const size_t slot = static_cast<size_t>(intra ? s % g : s / g);
      float* dst = in.data() + (static_cast<size_t>(d - local_.begin) * slots + slot) * slot_len;
      for (const LocoTensorPlan& p : plans_) {
        if (!p.compressed) continue;
        const int64_t u = partition_bytes(p, opts_.bits);
        for (int a = 0; a < (intra ? nodes_ : 1); ++a, src += u, dst += p.partition) {
          decode_partition(src, p, opts_.bits, dst);
        }
      }
    }
  }
}

// finish() across ranks: the uncompressed tensors by Communicator::exact_mean
// (the simulator's tree, rounded to the wire), the compressed partitions of
// this rank's workers from the q2 rows (held, or from in3_), then one
// allgather of every worker's partitions in the wire dtype (fp16 as its bits).
void LocoTwoStageExchange::finish_distributed(Communicator& comm, const WorkerBuffers& grads,
                                              std::span<float> out) {
  const int g = g_;
  size_t total = 0;  // Σ P over the compressed tensors: one worker's share
  for (const LocoTensorPlan& p : plans_) total += p.compressed ? p.partition : 0;
  size_t at = 0;  // the tensor's place in a worker's share
  for (const LocoTensorPlan& p : plans_) {
    if (!p.compressed) {
      const WorkerBuffers slice{grads.data + p.offset, grads.stride, p.size,
                                n_,                    grads.first,  grads.resident};
      comm.exact_mean(slice, out.subspan(p.offset, p.size), opts_.wire);
      continue;
    }
    const size_t P = p.partition;
    for (int z = local_.begin; z < local_.end; ++z) {
      const int a = z / g, b = z % g;
      const size_t zrow = static_cast<size_t>(z - local_.begin);
      float* o = out.data() + p.offset + static_cast<size_t>(z) * P;
      for (size_t k = 0; k < P; ++k) {
        float s = 0.0f;
        for (int i = 0; i < nodes_; ++i) {  // node order, as finish()
          const int src = i * g + b;
          s += src >= local_.begin && src < local_.end
                   ? q2_[row2(src) + p.stage2_offset + static_cast<size_t>(a) * P + k]
                   : in3_[(zrow * static_cast<size_t>(nodes_) + static_cast<size_t>(i)) * total +
                          at + k];
        }
        o[k] = s / static_cast<float>(nodes_);
      }
      round_to_wire({o, P}, opts_.wire);  // the completing allgather's precision
    }
    at += P;
  }
  if (total == 0) return;
  // The completion: every worker's partitions, in the wire dtype's bits.
  const bool half = opts_.wire == WireDtype::kFp16;
  const size_t elem = half ? 2 : 4;
  const auto walk = [&](int u, auto&& visit) {
    size_t off = 0;
    for (const LocoTensorPlan& p : plans_) {
      if (!p.compressed) continue;
      float* o = out.data() + p.offset + static_cast<size_t>(u) * p.partition;
      for (size_t k = 0; k < p.partition; ++k, off += elem) visit(o[k], off);
    }
  };
  allgather_messages(
      comm, static_cast<int64_t>(total * elem), send_,
      [&](int u, uint8_t* dst) {
        walk(u, [&](float& v, size_t off) {
          if (half) {
            const uint16_t h = float_to_half_bits(v);
            std::memcpy(dst + off, &h, 2);
          } else {
            std::memcpy(dst + off, &v, 4);
          }
        });
      },
      [&](int u, const uint8_t* src) {
        walk(u, [&](float& v, size_t off) {
          if (half) {
            uint16_t h;
            std::memcpy(&h, src + off, 2);
            v = half_bits_to_float(h);
          } else {
            std::memcpy(&v, src + off, 4);
          }
        });
      });
}

void LocoTwoStageExchange::run(Communicator& comm, const WorkerBuffers& grads, std::span<float> out,
                               uint64_t seed, int64_t step) {
  const WorkerRange mine = comm.local_workers();
  if (mine.begin != local_.begin || mine.end != local_.end) {
    throw std::logic_error("LocoTwoStageExchange: the communicator's workers are not `local`");
  }
  const bool across = distributed() && compressed_tensors_ > 0;
  if (nodes_ > 1) {
    apply_resets();
    stage1(grads, seed, step);
    if (across) exchange(comm, true);
    stage2(seed, step);
    if (across) exchange(comm, false);
  }
  if (distributed()) {
    finish_distributed(comm, grads, out);
  } else {
    finish(grads, out);
  }
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
