#include "sim/collectives/compressed_collectives.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <utility>

#include "sim/collectives/rank_messages.hpp"
#include "sim/core/float16.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

namespace {

// Copies `bits` bits starting at bit `first` of an MSB-first stream into a
// fresh MSB-first stream (unused low bits of its last byte 0): one chunk's
// codes out of a whole buffer's quantize_encode image.
void copy_bits(const uint8_t* src, size_t first, size_t bits, uint8_t* dst) {
  const size_t bytes = (bits + 7) / 8;
  if (first % 8 == 0) {
    std::memcpy(dst, src + first / 8, bytes);
  } else {
    std::memset(dst, 0, bytes);
    for (size_t k = 0; k < bits; ++k) {
      const size_t s = first + k;
      if (src[s / 8] & (0x80u >> (s % 8))) dst[k / 8] |= static_cast<uint8_t>(0x80u >> (k % 8));
    }
  }
  if (bits % 8) dst[bytes - 1] &= static_cast<uint8_t>(0xFFu << (8 - bits % 8));
}

}  // namespace

// ---------------------------------------------------------------------------

CompressedAllgatherMean::CompressedAllgatherMean(int workers, size_t dim,
                                                 std::shared_ptr<const Compressor> compressor,
                                                 int node_size, WorkerRange local)
    : n_(workers),
      g_(node_size <= 0 ? workers : node_size),
      d_(dim),
      stride_((dim + 15) / 16 * 16),
      local_(local.size() > 0 ? local : WorkerRange{0, workers}),
      c_(std::move(compressor)) {
  if (n_ % g_ != 0) {
    throw std::invalid_argument("node size " + std::to_string(g_) + " does not divide " +
                                std::to_string(n_) + " workers");
  }
  nodes_ = n_ / g_;
  const int b = local_.size();
  // Fewer resident workers than workers: this is one rank of several.
  const bool distributed = b < n_;
  by_node_ = distributed && hierarchical() && (g_ % b == 0 || b % g_ == 0);
  if (by_node_) {
    // It leads node k when it owns worker k·g (the node's first rank).
    lead_lo_ = (local_.begin + g_ - 1) / g_;
    lead_hi_ = (local_.end + g_ - 1) / g_;
  } else if (hierarchical() && !distributed) {
    lead_lo_ = 0;  // the simulator forms every node's mean
    lead_hi_ = nodes_;
  }  // else: flat, or across ranks without node communicators: streamed, no rows
  compressed_.assign(stride_ * static_cast<size_t>(b), 0.0f);
  node_mean_.assign(stride_ * static_cast<size_t>(lead_hi_ - lead_lo_), 0.0f);
  records_ = plan(n_, g_, d_, *c_);
}

std::vector<CommRecord> CompressedAllgatherMean::plan(int n, int node_size, size_t dim,
                                                      const Compressor& compressor) {
  const int64_t wire = compressor.wire_bytes(dim);
  const char* dtype = intern_dtype_name(compressor.wire_dtype());
  const int g = node_size <= 0 ? n : node_size;
  const int nodes = n / g;
  if (!(nodes > 1 && g > 1)) {
    return {make_comm_record("allgather", "ring", dtype, "all", n, 1, wire * n,
                             ring_allgather_cost(n, wire * n))};
  }
  return {
      make_comm_record("allgather", "ring", dtype, "intra", g, nodes, wire * g,
                       ring_allgather_cost(g, wire * g)),
      make_comm_record("allgather", "ring", dtype, "inter", nodes, 1, wire * nodes,
                       ring_allgather_cost(nodes, wire * nodes)),
      make_comm_record("broadcast", "tree", dtype, "intra", g, nodes, wire * nodes,
                       tree_broadcast_cost(g, wire * nodes)),
  };
}

// One call of run(): its inputs, the workers this rank holds, and the node
// communicators when node traffic goes over them.
struct CompressedAllgatherMean::Call {
  Communicator& comm;
  const WorkerBuffers& in;
  uint64_t seed;
  int64_t step;
  WorkerRange mine;
  const Communicator::NodeTransports* nt;  // by_node_ only
  int64_t wire;                            // bytes of one compressed image
};

void CompressedAllgatherMean::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                                  uint64_t seed, int64_t step) {
  const WorkerRange mine = comm.local_workers();
  if (mine.begin != local_.begin || mine.end != local_.end) {
    throw std::logic_error("CompressedAllgatherMean: the communicator's workers are not `local`");
  }
  const Call call{comm, in,     seed, step, mine,
                  hierarchical() && by_node_ ? &comm.node_transports(g_) : nullptr,
                  c_->wire_bytes(d_)};
  compress_workers(call);
  // Across ranks the packed wire images travel (encode: the same stream as
  // apply) and the receivers decode them — decode(encode(x)) == C(x) bit for
  // bit — one at a time into the depth-first evaluation of the simulator's
  // tree (streamed_mean), so no rank holds every worker's decoded row. Flat:
  // every worker's image reaches every rank over the world communicator.
  // Hierarchical, when each rank holds whole nodes or an equal share of one
  // (g a multiple or a divisor of the b workers per rank): over node
  // sub-communicators, as modelled (see below). Otherwise (departure) every
  // worker's image is allgathered over the world communicator and each rank
  // forms every node's mean itself.
  if (comm.distributed() && !by_node_) {
    allgather_messages(
        comm, call.wire, images_, [&](int i, uint8_t* dst) { encode_worker(call, i, dst); },
        [](int, const uint8_t*) {});
  }
  if (!hierarchical()) {
    if (comm.distributed()) {
      streamed_mean(
          n_, d_, [&](int i, std::span<float> dst) { worker_row(call, 0, i, dst); }, out,
          scratch_);
    } else {
      mean_over_workers(compressed(), out, WireDtype::kFp32);
    }
    comm.record(records_[0]);
    return;
  }
  // Stage 1, inside each node: allgather of the g images, node mean.
  gather_node_images(call);
  WorkerBuffers node_means{node_mean_.data(), stride_, d_, nodes_, lead_lo_, lead_hi_ - lead_lo_};
  for (int k = lead_lo_; k < lead_hi_; ++k) node_mean(call, k, node_means[k]);
  comm.record(records_[0]);
  // Stage 2: each node's leader compresses the node mean; leaders allgather.
  compress_node_means(call, node_means);
  comm.record(records_[1]);
  // Stage 3: each leader broadcasts the gathered images inside its node.
  comm.record(records_[2]);
  mean_of_node_means(call, node_means, out);
}

void CompressedAllgatherMean::compress_workers(const Call& call) {
  WorkerBuffers comp = compressed();
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = call.mine.begin; i < call.mine.end; ++i) {
    c_->apply(call.in[i], comp[i], worker_rng(call, i));
  }
}

RngStream CompressedAllgatherMean::worker_rng(const Call& call, int i) const {
  return RngStream(call.seed, Purpose::kCompress,
                   c_->shared_randomness() ? 0u : static_cast<uint32_t>(i),
                   static_cast<uint64_t>(call.step));
}

void CompressedAllgatherMean::encode_worker(const Call& call, int i, uint8_t* dst) const {
  c_->encode(call.in[i], {dst, static_cast<size_t>(call.wire)}, worker_rng(call, i));
}

void CompressedAllgatherMean::worker_row(const Call& call, int base, int i, std::span<float> dst) {
  if (i >= call.mine.begin && i < call.mine.end) {
    const std::span<float> row = compressed()[i];
    std::copy(row.begin(), row.end(), dst.begin());
  } else {
    c_->decode_shared({images_.data() + (i - base) * call.wire, static_cast<size_t>(call.wire)},
                      dst, worker_rng(call, i));
  }
}

RngStream CompressedAllgatherMean::leader_rng(const Call& call, int k) const {
  return RngStream(call.seed, Purpose::kCompress,
                   c_->shared_randomness() ? 0u : static_cast<uint32_t>(n_ + k),
                   static_cast<uint64_t>(call.step));
}

void CompressedAllgatherMean::gather_node_images(const Call& call) {
  // Across ranks (g > b): the node's ranks allgather their workers' images
  // over the node communicator and its leader forms the mean (g ≤ b: the node
  // lies on this rank, nothing moves).
  const int b = call.mine.size();
  if (!by_node_ || g_ <= b) return;
  const int k = call.mine.begin / g_;
  const int64_t block = b * call.wire;
  const int members = g_ / b;
  const auto [counts, displs] = equal_blocks(call.comm, members, block);
  images_.resize(static_cast<size_t>(g_ * call.wire));
  for (int i = call.mine.begin; i < call.mine.end; ++i) {
    encode_worker(call, i, images_.data() + (i - k * g_) * call.wire);
  }
  call.nt->node->allgatherv(images_.data(), counts, displs);
}

void CompressedAllgatherMean::node_mean(const Call& call, int k, std::span<float> dst) {
  // From resident rows when the node lies on this process, else streamed
  // from the received images (worker 0 or the node's first at images_[0]).
  const int lo = k * g_;
  if (lo >= call.mine.begin && lo + g_ <= call.mine.end) {
    const WorkerBuffers members{compressed()[lo].data(), stride_, d_, g_};
    mean_over_workers(members, dst, WireDtype::kFp32);
  } else {
    const int base = by_node_ ? lo : 0;
    streamed_mean(
        g_, d_, [&](int j, std::span<float> row) { worker_row(call, base, lo + j, row); }, dst,
        inner_scratch_);
  }
}

void CompressedAllgatherMean::compress_node_means(const Call& call, WorkerBuffers& node_means) {
  // Across ranks the leaders' images travel over the leaders' communicator
  // (g ≥ b: the first rank of every node) or, when every rank leads b/g whole
  // nodes, over the world communicator: one image per node crosses nodes.
  const int b = call.mine.size();
  const int64_t wire = call.wire;
  node_images_.resize(by_node_ ? static_cast<size_t>(nodes_ * wire) : 0);
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = lead_lo_; k < lead_hi_; ++k) {
    const RngStream rng = leader_rng(call, k);
    if (by_node_) {
      c_->encode(node_means[k], {node_images_.data() + k * wire, static_cast<size_t>(wire)}, rng);
    }
    c_->apply(node_means[k], node_means[k], rng);
  }
  if (!by_node_) return;
  Transport* leaders = g_ >= b ? call.nt->leaders.get() : &call.comm.transport();
  if (leaders != nullptr) {
    const int64_t block = std::max(1, b / g_) * wire;
    const auto [counts, displs] = equal_blocks(call.comm, leaders->ranks(), block);
    leaders->allgatherv(node_images_.data(), counts, displs);
  }
  // Stage 3 across ranks (g > b): the node's leader broadcasts the gathered
  // images over the node communicator.
  if (g_ > b) call.nt->node->broadcast(node_images_.data(), nodes_ * wire, 0);
}

void CompressedAllgatherMean::mean_of_node_means(const Call& call, const WorkerBuffers& node_means,
                                                 std::span<float> out) {
  if (!call.comm.distributed()) {
    mean_over_workers(node_means, out, WireDtype::kFp32);
    return;
  }
  // out = mean over nodes of C(node mean): led nodes' from their rows, the
  // others' decoded from the gathered node images (by_node) or, without node
  // communicators, formed here from every worker's image and compressed with
  // the node leader's stream (every rank computes the same values).
  streamed_mean(
      nodes_, d_,
      [&](int k, std::span<float> dst) {
        if (k >= lead_lo_ && k < lead_hi_) {
          std::copy(node_means[k].begin(), node_means[k].end(), dst.begin());
        } else if (by_node_) {
          c_->decode_shared({node_images_.data() + k * call.wire, static_cast<size_t>(call.wire)},
                            dst, leader_rng(call, k));
        } else {
          node_mean(call, k, dst);
          c_->apply(dst, dst, leader_rng(call, k));
        }
      },
      out, scratch_);
}

// ---------------------------------------------------------------------------

QuantizedReduceScatter::QuantizedReduceScatter(int workers, size_t dim, const QuantizeSpec& spec,
                                               std::string gather, WorkerRange local)
    : n_(workers),
      d_(dim),
      local_(local.size() > 0 ? local : WorkerRange{0, workers}),
      spec_(spec),
      gather_(std::move(gather)) {
  if (gather_ != "quantized" && gather_ != "fp16" && gather_ != "fp32") {
    throw std::invalid_argument("gather must be quantized, fp16 or fp32, not " + gather_);
  }
  const size_t m = static_cast<size_t>(n_) * spec_.group_size;
  D_ = (std::max<size_t>(d_, 1) + m - 1) / m * m;
  stride_ = D_;
  quantized_.assign(stride_ * static_cast<size_t>(local_.size()), 0.0f);
  // Across ranks (fewer resident workers than workers): every worker's codes
  // of this rank's chunks, decoded — n × (local workers · D/n) floats.
  if (local_.size() < n_) {
    columns_.assign(static_cast<size_t>(n_) * (D_ / n_) * static_cast<size_t>(local_.size()), 0.0f);
  }
  mean_.assign(D_, 0.0f);
  records_ = plan(n_, d_, spec_, gather_);
}

std::vector<CommRecord> QuantizedReduceScatter::plan(int n, size_t dim, const QuantizeSpec& spec,
                                                     const std::string& gather) {
  const size_t m = static_cast<size_t>(n) * spec.group_size;
  const size_t D = (std::max<size_t>(dim, 1) + m - 1) / m * m;
  const size_t chunk = D / n;
  const int64_t wire1 = quantize_wire_bytes(chunk, spec);
  const char* codes = intern_dtype_name("int" + std::to_string(spec.bits));
  int64_t wire2 = static_cast<int64_t>(4 * chunk);
  const char* dtype2 = "fp32";
  if (gather == "quantized") {
    wire2 = wire1;
    dtype2 = codes;
  } else if (gather == "fp16") {
    wire2 = static_cast<int64_t>(2 * chunk);
    dtype2 = "fp16";
  }
  return {
      make_comm_record("alltoall", "pairwise", codes, "all", n, 1, wire1 * n,
                       pairwise_alltoall_cost(n, wire1 * n)),
      make_comm_record("allgather", "ring", dtype2, "all", n, 1, wire2 * n,
                       ring_allgather_cost(n, wire2 * n)),
  };
}

double QuantizedReduceScatter::sent_bytes_per_call() const {
  const size_t chunk = D_ / n_;
  const double stage1 = static_cast<double>(quantize_wire_bytes(chunk, spec_));
  const double stage2 = gather_ == "quantized"
                            ? static_cast<double>(quantize_wire_bytes(chunk, spec_))
                        : gather_ == "fp16" ? 2.0 * chunk
                                            : 4.0 * chunk;
  return (n_ - 1) * (stage1 + stage2);
}

void QuantizedReduceScatter::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                                 uint64_t seed, int64_t step) {
  const WorkerRange mine = comm.local_workers();
  if (mine.begin != local_.begin || mine.end != local_.end) {
    throw std::logic_error("QuantizedReduceScatter: the communicator's workers are not `local`");
  }
  quantize_workers(comm, in, seed, step);
  // alltoall: chunk r of each worker's codes (and its groups' scales) to worker r.
  comm.record(records_[0]);
  average_chunks(comm);
  // Stage 2: the averaged chunks go back to everyone.
  const int64_t wire2 = requantize_means(comm, seed, step);
  if (comm.distributed()) gather_means(comm, wire2);
  comm.record(records_[1]);
  std::copy(mean_.begin(), mean_.begin() + static_cast<ptrdiff_t>(d_), out.begin());
}

size_t QuantizedReduceScatter::image_bytes() const {
  return static_cast<size_t>(quantize_wire_bytes(D_, spec_));
}

int64_t QuantizedReduceScatter::chunk_wire_bytes() const {
  return quantize_wire_bytes(D_ / n_, spec_);
}

void QuantizedReduceScatter::quantize_workers(Communicator& comm, const WorkerBuffers& in,
                                              uint64_t seed, int64_t step) {
  // Stage 1: every worker quantizes its zero-padded buffer (groups never
  // straddle a chunk: chunk is a multiple of group_size).
  const size_t D = D_;
  const WorkerRange mine = comm.local_workers();
  const WorkerBuffers q = quantized();
  const size_t image = image_bytes();
  // Across ranks: the workers' packed images (member: grown once, reused).
  if (comm.distributed() && images_.size() < image * mine.size()) {
    images_.resize(image * mine.size());
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = mine.begin; i < mine.end; ++i) {
    thread_local std::vector<float> padded;
    padded.assign(D, 0.0f);
    std::copy(in[i].begin(), in[i].end(), padded.begin());
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(i),
                        static_cast<uint64_t>(step));
    quantize_dequantize(padded, {q[i].data(), D}, spec_, rng);
    // Across ranks: the packed image of the whole padded buffer (codes and
    // group scales), from which each chunk's message is cut below.
    if (comm.distributed()) {
      quantize_encode(padded, {images_.data() + (i - mine.begin) * image, image}, spec_, rng);
    }
  }
}

void QuantizedReduceScatter::average_chunks(Communicator& comm) {
  // Worker r averages the dequantized chunks (the fixed tree over workers).
  // Across ranks, chunk r of every worker reaches r's owner first as its
  // wire message — the chunk's packed codes then its groups' scales, exactly
  // quantize_wire_bytes(chunk) — and is decoded there (quantize_decode of a
  // chunk's codes and scales == quantize_dequantize of those elements) into
  // columns_, every worker's row of this rank's chunks (row i at i·len); the
  // resident workers' rows are copied in. The tree is per element, so it
  // gives the simulator's values whatever the row layout.
  const int n = n_, bits = spec_.bits;
  const size_t D = D_, chunk = D_ / n_;
  const WorkerRange mine = comm.local_workers();
  const size_t lo = static_cast<size_t>(mine.begin) * chunk;
  const size_t len = static_cast<size_t>(mine.size()) * chunk;
  if (!comm.distributed()) {
    cpu::dequantize_reduce(quantized_.data() + lo, D, n, len, mean_.data() + lo);
    return;
  }
  const WorkerBuffers q = quantized();
  const size_t image = image_bytes();
  const int64_t wire1 = chunk_wire_bytes();
  const size_t code_bytes = (D * static_cast<size_t>(bits) + 7) / 8;
  const size_t scale_bytes = spec_.fp16_scale ? 2 : 4;
  const size_t chunk_code_bytes = (chunk * static_cast<size_t>(bits) + 7) / 8;
  const size_t chunk_groups = chunk / spec_.group_size;
  for (int i = mine.begin; i < mine.end; ++i) {
    std::copy(q[i].data() + lo, q[i].data() + lo + len,
              columns_.data() + static_cast<size_t>(i) * len);
  }
  alltoall_messages(
      comm, wire1,
      [&](int i, int r, uint8_t* dst) {
        const uint8_t* img = images_.data() + (i - mine.begin) * image;
        copy_bits(img, static_cast<size_t>(r) * chunk * bits, chunk * bits, dst);
        std::memcpy(dst + chunk_code_bytes,
                    img + code_bytes + static_cast<size_t>(r) * chunk_groups * scale_bytes,
                    chunk_groups * scale_bytes);
      },
      [&](int i, int r, const uint8_t* src) {
        quantize_decode({src, static_cast<size_t>(wire1)},
                        {columns_.data() + static_cast<size_t>(i) * len +
                             (static_cast<size_t>(r) * chunk - lo),
                         chunk},
                        spec_);
      });
  cpu::dequantize_reduce(columns_.data(), len, n, len, mean_.data() + lo);
}

int64_t QuantizedReduceScatter::requantize_means(Communicator& comm, uint64_t seed, int64_t step) {
  const size_t chunk = D_ / n_;
  const WorkerRange mine = comm.local_workers();
  const int64_t wire1 = chunk_wire_bytes();
  if (gather_ == "fp16") {
    round_to_wire(mean_, WireDtype::kFp16);
    return static_cast<int64_t>(2 * chunk);
  }
  if (gather_ != "quantized") return static_cast<int64_t>(4 * chunk);
#pragma omp parallel for schedule(dynamic, 1)
  for (int r = mine.begin; r < mine.end; ++r) {
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(n_ + r),
                        static_cast<uint64_t>(step));
    std::span<float> c(mean_.data() + static_cast<size_t>(r) * chunk, chunk);
    thread_local std::vector<float> copy;
    copy.assign(c.begin(), c.end());
    quantize_dequantize(copy, c, spec_, rng);
    if (comm.distributed()) {
      quantize_encode(copy, {images_.data() + (r - mine.begin) * wire1, static_cast<size_t>(wire1)},
                      spec_, rng);
    }
  }
  return wire1;
}

void QuantizedReduceScatter::gather_means(Communicator& comm, int64_t wire2) {
  // Across ranks: server r's averaged chunk in the gather precision — its
  // re-quantized codes and scales, fp16 bits or fp32 — decoded by the others.
  const size_t chunk = D_ / n_;
  const WorkerRange mine = comm.local_workers();
  const int64_t wire1 = chunk_wire_bytes();
  allgather_messages(
      comm, wire2, gathered_,
      [&](int r, uint8_t* dst) {
        const float* c = mean_.data() + static_cast<size_t>(r) * chunk;
        if (gather_ == "quantized") {
          std::memcpy(dst, images_.data() + (r - mine.begin) * wire1, static_cast<size_t>(wire1));
        } else if (gather_ == "fp16") {
          for (size_t k = 0; k < chunk; ++k) {
            const uint16_t h = float_to_half_bits(c[k]);
            std::memcpy(dst + 2 * k, &h, 2);
          }
        } else {
          std::memcpy(dst, c, 4 * chunk);
        }
      },
      [&](int r, const uint8_t* src) {
        float* c = mean_.data() + static_cast<size_t>(r) * chunk;
        if (gather_ == "quantized") {
          quantize_decode({src, static_cast<size_t>(wire1)}, {c, chunk}, spec_);
        } else if (gather_ == "fp16") {
          for (size_t k = 0; k < chunk; ++k) {
            uint16_t h;
            std::memcpy(&h, src + 2 * k, 2);
            c[k] = half_bits_to_float(h);
          }
        } else {
          std::memcpy(c, src, 4 * chunk);
        }
      });
}

void CompressedAllgatherMean::serialize(StateArchive& io) {
  io.field("allgather_mean.compressed", compressed_);
  io.field("allgather_mean.node_mean", node_mean_);
}

void QuantizedReduceScatter::serialize(StateArchive& io) {
  io.field("reduce_scatter.quantized", quantized_);
}

}  // namespace bitlab
