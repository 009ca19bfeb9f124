#include "sim/compressed_collectives.hpp"

#include <stdexcept>

#include "sim/float16.hpp"
#include "sim/kernels/reference.hpp"

namespace bitlab {

// ---------------------------------------------------------------------------

CompressedAllgatherMean::CompressedAllgatherMean(int workers, size_t dim,
                                                 std::shared_ptr<const Compressor> compressor,
                                                 int node_size)
    : n_(workers),
      g_(node_size <= 0 ? workers : node_size),
      d_(dim),
      stride_((dim + 15) / 16 * 16),
      c_(std::move(compressor)) {
  if (n_ % g_ != 0) {
    throw std::invalid_argument("node size " + std::to_string(g_) + " does not divide " +
                                std::to_string(n_) + " workers");
  }
  nodes_ = n_ / g_;
  compressed_.assign(stride_ * n_, 0.0f);
  node_mean_.assign(stride_ * nodes_, 0.0f);
}

void CompressedAllgatherMean::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                                  uint64_t seed, int64_t step) {
  const int n = n_;
  const bool shared = c_->shared_randomness();
  const char* dtype = intern_dtype_name(c_->wire_dtype());
  const int64_t wire = c_->wire_bytes(d_);
  WorkerBuffers comp = compressed();
  const WorkerRange mine = comm.local_workers();
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = mine.begin; i < mine.end; ++i) {
    const RngStream rng(seed, Purpose::kCompress, shared ? 0u : static_cast<uint32_t>(i),
                        static_cast<uint64_t>(step));
    c_->apply(in[i], comp[i], rng);
  }
  // Across ranks every worker's image reaches every rank, which then forms
  // the means itself. Departure from the modelled exchange: the images travel
  // decoded as fp32 rows over the world communicator, also for the
  // hierarchical variant (no node sub-communicators yet), so the bytes handed
  // to MPI exceed the logged ones.
  comm.share_rows(compressed_.data(), stride_ * sizeof(float));
  if (!hierarchical()) {
    mean_over_workers(comp, out, WireDtype::kFp32);
    comm.record(make_comm_record("allgather", "ring", dtype, "all", n, 1, wire * n,
                                 ring_allgather_cost(n, wire * n)));
    return;
  }
  // Stage 1, inside each node: allgather of the g images, node mean.
  WorkerBuffers node_means{node_mean_.data(), stride_, d_, nodes_};
  for (int k = 0; k < nodes_; ++k) {
    const WorkerBuffers members{compressed_.data() + static_cast<size_t>(k) * g_ * stride_, stride_,
                                d_, g_};
    mean_over_workers(members, node_means[k], WireDtype::kFp32);
  }
  comm.record(make_comm_record("allgather", "ring", dtype, "intra", g_, nodes_, wire * g_,
                               ring_allgather_cost(g_, wire * g_)));
  // Stage 2: each node's leader compresses the node mean; leaders allgather.
#pragma omp parallel for schedule(dynamic, 1)
  for (int k = 0; k < nodes_; ++k) {
    const RngStream rng(seed, Purpose::kCompress, shared ? 0u : static_cast<uint32_t>(n + k),
                        static_cast<uint64_t>(step));
    c_->apply(node_means[k], node_means[k], rng);
  }
  comm.record(make_comm_record("allgather", "ring", dtype, "inter", nodes_, 1, wire * nodes_,
                               ring_allgather_cost(nodes_, wire * nodes_)));
  // Stage 3: each leader broadcasts the gathered images inside its node.
  comm.record(make_comm_record("broadcast", "tree", dtype, "intra", g_, nodes_, wire * nodes_,
                               tree_broadcast_cost(g_, wire * nodes_)));
  mean_over_workers(node_means, out, WireDtype::kFp32);
}

// ---------------------------------------------------------------------------

QuantizedReduceScatter::QuantizedReduceScatter(int workers, size_t dim, const QuantizeSpec& spec,
                                               std::string gather)
    : n_(workers), d_(dim), spec_(spec), gather_(std::move(gather)) {
  if (gather_ != "quantized" && gather_ != "fp16" && gather_ != "fp32") {
    throw std::invalid_argument("gather must be quantized, fp16 or fp32, not " + gather_);
  }
  const size_t m = static_cast<size_t>(n_) * spec_.group_size;
  D_ = (std::max<size_t>(d_, 1) + m - 1) / m * m;
  stride_ = D_;
  quantized_.assign(stride_ * n_, 0.0f);
  mean_.assign(D_, 0.0f);
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
  const int n = n_;
  const size_t D = D_, d = d_, chunk = D_ / n_;
  // Stage 1: every worker quantizes its zero-padded buffer (groups never
  // straddle a chunk: chunk is a multiple of group_size).
  const WorkerRange mine = comm.local_workers();
#pragma omp parallel for schedule(dynamic, 1)
  for (int i = mine.begin; i < mine.end; ++i) {
    thread_local std::vector<float> padded;
    padded.assign(D, 0.0f);
    std::copy(in[i].begin(), in[i].end(), padded.begin());
    const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(i),
                        static_cast<uint64_t>(step));
    quantize_dequantize(padded, {quantized_.data() + static_cast<size_t>(i) * D, D}, spec_, rng);
  }
  const int bits = spec_.bits;
  static const char* kInt[] = {"", "int1", "int2", "int3", "int4", "int5", "int6", "int7", "int8"};
  const int64_t wire1 = quantize_wire_bytes(chunk, spec_);
  // alltoall: chunk r of each worker's codes (and its groups' scales) to worker r.
  comm.record(make_comm_record("alltoall", "pairwise", kInt[bits], "all", n, 1, wire1 * n,
                               pairwise_alltoall_cost(n, wire1 * n)));
  // Worker r averages the dequantized chunks (the fixed tree over workers).
  // Across ranks, chunk r of every worker reaches r's owner first. Departure:
  // the chunks travel dequantized as fp32, not as n-bit codes, so the bytes
  // handed to MPI exceed the logged ones.
  const std::vector<int64_t> chunk_bounds =
      comm.server_bounds(static_cast<int64_t>(chunk * sizeof(float)));
  comm.scatter_columns(quantized_.data(), D * sizeof(float), chunk_bounds);
  {
    const size_t lo = static_cast<size_t>(mine.begin) * chunk;
    const size_t len = static_cast<size_t>(mine.size()) * chunk;
    cpu::dequantize_reduce(quantized_.data() + lo, D, n, len, mean_.data() + lo);
  }
  // Stage 2: the averaged chunks go back to everyone.
  int64_t wire2 = 0;
  const char* dtype2 = "fp32";
  if (gather_ == "quantized") {
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = mine.begin; r < mine.end; ++r) {
      const RngStream rng(seed, Purpose::kCompress, static_cast<uint32_t>(n + r),
                          static_cast<uint64_t>(step));
      std::span<float> c(mean_.data() + static_cast<size_t>(r) * chunk, chunk);
      thread_local std::vector<float> copy;
      copy.assign(c.begin(), c.end());
      quantize_dequantize(copy, c, spec_, rng);
    }
    wire2 = wire1;
    dtype2 = kInt[bits];
  } else if (gather_ == "fp16") {
    round_to_wire(mean_, WireDtype::kFp16);
    wire2 = static_cast<int64_t>(2 * chunk);
    dtype2 = "fp16";
  } else {
    wire2 = static_cast<int64_t>(4 * chunk);
  }
  comm.gather_columns(mean_.data(), chunk_bounds);
  comm.record(make_comm_record("allgather", "ring", dtype2, "all", n, 1, wire2 * n,
                               ring_allgather_cost(n, wire2 * n)));
  std::copy(mean_.begin(), mean_.begin() + static_cast<ptrdiff_t>(d), out.begin());
}

}  // namespace bitlab
