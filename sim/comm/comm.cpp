#include "sim/comm/comm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

WireCost ring_allreduce_cost(int p, int64_t s) {
  if (p <= 1) return {0.0, 0};
  return {2.0 * (p - 1) / p * static_cast<double>(s), 2 * static_cast<int64_t>(p - 1)};
}

WireCost tree_allreduce_cost(int p, int64_t s) {
  if (p <= 1) return {0.0, 0};
  int64_t log2p = 0;
  while ((int64_t{1} << log2p) < p) ++log2p;
  return {2.0 * (p - 1) / p * static_cast<double>(s), 2 * log2p};
}

WireCost ring_allgather_cost(int p, int64_t s) {
  if (p <= 1) return {0.0, 0};
  return {static_cast<double>(p - 1) / p * static_cast<double>(s), static_cast<int64_t>(p - 1)};
}

WireCost pairwise_alltoall_cost(int p, int64_t s) {
  return ring_allgather_cost(p, s);
}

WireCost tree_broadcast_cost(int p, int64_t s) {
  if (p <= 1) return {0.0, 0};
  int64_t log2p = 0;
  while ((int64_t{1} << log2p) < p) ++log2p;
  // Every non-root receives S once: (p-1) S bytes in all, averaged over ranks.
  return {static_cast<double>(p - 1) / p * static_cast<double>(s), log2p};
}

CommRecord make_comm_record(const char* op, const char* algorithm, const char* dtype,
                            const char* scope, int ranks, int groups, int64_t payload_bytes,
                            WireCost cost) {
  CommRecord r;
  r.op = op;
  r.algorithm = algorithm;
  r.dtype = dtype;
  r.scope = scope;
  r.ranks = ranks;
  r.groups = groups;
  r.payload_bytes = payload_bytes;
  r.sent_bytes = cost.sent_bytes;
  r.messages = cost.messages;
  return r;
}

const char* intern_dtype_name(const std::string& dtype) {
  for (const char* known : {"fp32", "fp16", "bf16", "bits", "int1", "int2", "int3", "int4", "int5",
                            "int6", "int7", "int8", "sparse", "values"}) {
    if (dtype == known) return known;
  }
  return "compressed";
}

namespace {

// The 16-bit wire values of fp16 / bf16 on the MPI wire: to_bits rounds as
// round_to_wire does, from_bits widens exactly, so from_bits(to_bits(v)) is
// the simulator's rounded value bit for bit (float16.hpp).
struct Wire16 {
  bool half;
  explicit Wire16(WireDtype wire) : half(wire == WireDtype::kFp16) {}
  uint16_t to_bits(float v) const { return half ? float_to_half_bits(v) : float_to_bf16_bits(v); }
  float from_bits(uint16_t h) const { return half ? half_bits_to_float(h) : bf16_bits_to_float(h); }
};
}  // namespace

Communicator::Communicator(int workers, Transport* transport)
    : workers_(workers), transport_(transport) {
  rank_ = this->transport().rank();
  ranks_ = this->transport().ranks();
  if (workers_ % ranks_ != 0) {
    config_fail("cluster.workers", Json(workers_),
                "must be a multiple of the number of MPI ranks (" + std::to_string(ranks_) +
                    "): each rank owns an equal contiguous block of workers");
  }
  block_ = workers_ / ranks_;
}

std::span<const int64_t> Communicator::server_bounds(int64_t unit_bytes) {
  server_bounds_.resize(static_cast<size_t>(ranks_) + 1);
  for (int q = 0; q <= ranks_; ++q) {
    server_bounds_[q] = static_cast<int64_t>(q) * block_ * unit_bytes;
  }
  return server_bounds_;
}

Communicator::ColumnBlock Communicator::alltoall_columns(void* base, size_t row_stride_bytes,
                                                         int first_row,
                                                         std::span<const int64_t> bounds) {
  auto* rows = static_cast<uint8_t*>(base);
  if (!distributed()) return {rows + bounds[0], row_stride_bytes};
  const WorkerRange mine = local_workers();
  const int64_t my_width = bounds[rank_ + 1] - bounds[rank_];
  counts_.assign(ranks_, 0);
  displs_.assign(ranks_, 0);
  rcounts_.assign(ranks_, 0);
  rdispls_.assign(ranks_, 0);
  int64_t send_total = 0, recv_total = 0;
  for (int q = 0; q < ranks_; ++q) {
    counts_[q] = static_cast<int64_t>(block_) * (bounds[q + 1] - bounds[q]);
    displs_[q] = send_total;
    send_total += counts_[q];
    rcounts_[q] = static_cast<int64_t>(block_) * my_width;
    rdispls_[q] = recv_total;
    recv_total += rcounts_[q];
  }
  send_.resize(static_cast<size_t>(send_total));
  recv_.resize(static_cast<size_t>(recv_total));
  // Pack: for rank q, column block q of each of my rows, row by row.
  for (int q = 0; q < ranks_; ++q) {
    const size_t w = static_cast<size_t>(bounds[q + 1] - bounds[q]);
    uint8_t* dst = send_.data() + displs_[q];
    for (int i = mine.begin; i < mine.end; ++i, dst += w) {
      std::memcpy(dst, rows + static_cast<size_t>(i - first_row) * row_stride_bytes + bounds[q], w);
    }
  }
  transport().alltoallv(send_.data(), counts_, displs_, recv_.data(), rcounts_, rdispls_);
  // Rank q's block of rows arrives in worker order: recv_ is workers rows of
  // my_width bytes.
  return {recv_.data(), static_cast<size_t>(my_width)};
}

void Communicator::gather_columns(void* base, std::span<const int64_t> bounds) {
  if (!distributed()) return;
  counts_.assign(ranks_, 0);
  displs_.assign(ranks_, 0);
  for (int q = 0; q < ranks_; ++q) {
    counts_[q] = bounds[q + 1] - bounds[q];
    displs_[q] = bounds[q];
  }
  transport().allgatherv(static_cast<uint8_t*>(base), counts_, displs_);
}

const Communicator::NodeTransports& Communicator::node_transports(int node_size) {
  for (const NodeTransports& t : node_transports_) {
    if (t.node_size == node_size) return t;
  }
  NodeTransports t;
  t.node_size = node_size;
  const int node = rank_ * block_ / node_size;
  t.node = transport().split(node, rank_);
  t.leaders = transport().split(rank_ * block_ % node_size == 0 ? 0 : -1, rank_);
  node_transports_.push_back(std::move(t));
  return node_transports_.back();
}

void Communicator::share_rows(void* base, size_t row_stride_bytes) {
  if (!distributed()) return;
  gather_columns(base, server_bounds(static_cast<int64_t>(row_stride_bytes)));
}

void Communicator::exact_mean(const WorkerBuffers& in, std::span<float> out, WireDtype wire) {
  if (!distributed()) {
    mean_over_workers(in, out, wire);
    return;
  }
  // Rank q reduces elements [q·len/R, (q+1)·len/R): the per-element sum is
  // the same tree over all workers whoever computes it.
  // The values travel in the wire dtype (4 or 2 bytes each): the tree rounds
  // every input to the wire type first, and the mean is rounded to it, so
  // 16-bit values lose nothing the simulator keeps.
  const int64_t elem = wire_dtype_bytes(wire);
  const std::span<int64_t> bounds = staging<int64_t>(Staging::kBounds, ranks_ + 1);
  for (int q = 0; q <= ranks_; ++q) {
    bounds[q] = static_cast<int64_t>(in.len * static_cast<size_t>(q) / ranks_) * elem;
  }
  const size_t lo = static_cast<size_t>(bounds[rank_] / elem);
  const size_t len = static_cast<size_t>(bounds[rank_ + 1] / elem) - lo;
  if (wire == WireDtype::kFp32) {
    // Every worker's copy of my element range, workers × len floats.
    const ColumnBlock got = alltoall_columns(in.data, in.stride * sizeof(float), in.first, bounds);
    if (len > 0) {
      mean_over_workers({reinterpret_cast<float*>(got.data), len, len, workers_},
                        out.subspan(lo, len), wire);
    }
    gather_columns(out.data(), bounds);
    return;
  }
  const Wire16 w(wire);
  // My workers' rows as 16-bit values; after the alltoall every worker's copy
  // of my element range is widened (exactly) into floats for the tree.
  const WorkerRange mine = local_workers();
  const std::span<uint16_t> rows =
      staging<uint16_t>(Staging::kRows, in.len * static_cast<size_t>(mine.size()));
  for (int i = mine.begin; i < mine.end; ++i) {
    const std::span<float> x = in[i];
    uint16_t* row = rows.data() + static_cast<size_t>(i - mine.begin) * in.len;
    for (size_t k = 0; k < in.len; ++k) row[k] = w.to_bits(x[k]);
  }
  const ColumnBlock got =
      alltoall_columns(rows.data(), in.len * sizeof(uint16_t), mine.begin, bounds);
  const std::span<float> wide = staging<float>(Staging::kWide, len * static_cast<size_t>(workers_));
  for (int i = 0; i < workers_; ++i) {
    const auto* src = reinterpret_cast<const uint16_t*>(got.data + i * got.row_stride);
    for (size_t k = 0; k < len; ++k) wide[static_cast<size_t>(i) * len + k] = w.from_bits(src[k]);
  }
  if (len > 0) mean_over_workers({wide.data(), len, len, workers_}, out.subspan(lo, len), wire);
  const std::span<uint16_t> result = staging<uint16_t>(Staging::kResult, in.len);
  for (size_t k = lo; k < lo + len; ++k) result[k] = w.to_bits(out[k]);
  gather_columns(result.data(), bounds);
  for (size_t k = 0; k < in.len; ++k) {
    if (k < lo || k >= lo + len) out[k] = w.from_bits(result[k]);
  }
}

void Communicator::allreduce_mean(const WorkerBuffers& in, std::span<float> out, WireDtype wire,
                                  const char* algorithm) {
  exact_mean(in, out, wire);
  record(allreduce_record(workers_, static_cast<int64_t>(in.len), wire, algorithm));
}

CommRecord allreduce_record(int workers, int64_t len, WireDtype wire, const char* algorithm) {
  const int64_t s = len * wire_dtype_bytes(wire);
  const bool tree = std::string_view(algorithm) == "tree";
  const WireCost c = tree ? tree_allreduce_cost(workers, s) : ring_allreduce_cost(workers, s);
  return make_comm_record("allreduce", tree ? "tree" : "ring", wire_dtype_name(wire), "all",
                          workers, 1, s, c);
}

void Communicator::allgather(const WorkerBuffers& in, std::span<float> out, WireDtype wire) {
  const size_t len = in.len;
  const int first = in.first, last = in.first + in.resident_count();
  if (!distributed() || wire == WireDtype::kFp32) {
    // The resident rows into `out`, then the owners' blocks of `out` to all.
    for (int i = first; i < last; ++i) {
      auto src = in[i];
      std::copy(src.begin(), src.end(), out.begin() + static_cast<ptrdiff_t>(i * len));
    }
    share_rows(out.data(), len * sizeof(float));
    round_to_wire(out.first(len * in.count), wire);
  } else {
    // Across ranks in a 16-bit wire dtype the rows travel as their 16-bit
    // values (2 bytes each, as logged), widened exactly on arrival.
    const Wire16 w(wire);
    const std::span<uint16_t> bits =
        staging<uint16_t>(Staging::kRows, len * static_cast<size_t>(in.count));
    for (int i = first; i < last; ++i) {
      const std::span<float> x = in[i];
      uint16_t* row = bits.data() + static_cast<size_t>(i) * len;
      for (size_t k = 0; k < len; ++k) row[k] = w.to_bits(x[k]);
    }
    share_rows(bits.data(), len * sizeof(uint16_t));
    for (size_t k = 0; k < bits.size(); ++k) out[k] = w.from_bits(bits[k]);
  }
  const int64_t s = static_cast<int64_t>(in.len) * in.count * wire_dtype_bytes(wire);
  const WireCost c = ring_allgather_cost(workers_, s);
  CommRecord r;
  r.op = "allgather";
  r.algorithm = "ring";
  r.dtype = wire_dtype_name(wire);
  r.ranks = workers_;
  r.payload_bytes = s;
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  record(r);
}

void Communicator::broadcast(const WorkerBuffers& bufs, int root, WireDtype wire) {
  // The root's buffer, received by the ranks that do not hold it, lands in
  // every resident buffer.
  const std::span<float> src = staging<float>(Staging::kWide, bufs.len);
  const bool held = owner(root) == rank_;
  if (held) std::copy(bufs[root].begin(), bufs[root].end(), src.begin());
  if (distributed() && wire != WireDtype::kFp32) {
    // 16-bit values on the MPI wire (2 bytes each, as logged), widened
    // exactly: round_to_wire's values.
    const Wire16 w(wire);
    const std::span<uint16_t> bits = staging<uint16_t>(Staging::kRows, bufs.len);
    if (held) {
      for (size_t k = 0; k < bits.size(); ++k) bits[k] = w.to_bits(src[k]);
    }
    transport().broadcast(reinterpret_cast<uint8_t*>(bits.data()),
                          static_cast<int64_t>(bits.size() * sizeof(uint16_t)), owner(root));
    for (size_t k = 0; k < bits.size(); ++k) src[k] = w.from_bits(bits[k]);
  } else {
    if (distributed()) {
      transport().broadcast(reinterpret_cast<uint8_t*>(src.data()),
                            static_cast<int64_t>(src.size() * sizeof(float)), owner(root));
    }
    round_to_wire(src, wire);
  }
  for (int i = bufs.first; i < bufs.first + bufs.resident_count(); ++i) {
    std::copy(src.begin(), src.end(), bufs[i].begin());
  }
  const int64_t s = static_cast<int64_t>(bufs.len) * wire_dtype_bytes(wire);
  const WireCost c = tree_broadcast_cost(workers_, s);
  CommRecord r;
  r.op = "broadcast";
  r.algorithm = "tree";
  r.dtype = wire_dtype_name(wire);
  r.ranks = workers_;
  r.payload_bytes = s;
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  record(r);
}

}  // namespace bitlab
