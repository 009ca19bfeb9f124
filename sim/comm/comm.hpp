// The communicator: the math of every collective over the emulated workers'
// buffers, and the only place where bytes are counted (docs/design.md, "One
// concept, one place"). Each call appends one CommRecord per underlying
// collective to the run's CommLog; the network model prices that log later,
// never knowing which optimizer produced it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sim/comm/transport.hpp"
#include "sim/core/float16.hpp"
#include "sim/kernels/worker_mean.hpp"

namespace bitlab {

// One collective as the network model needs to price it. Sizes follow the cost
// table of docs/algorithms.md §8: for allreduce S = the buffer of one rank; for
// allgather / reduce-scatter S = the total gathered; for alltoall S = the bytes
// one rank sends in total (its own chunk included).
struct CommRecord {
  int64_t step = 0;
  const char* op = "";         // allreduce | allgather | reduce_scatter | alltoall | broadcast
  const char* algorithm = "";  // ring | tree | pairwise | ...
  const char* dtype = "";      // fp32 | fp16 | bf16 | bits | ...
  const char* scope = "all";   // all | intra (within each node) | inter (across nodes)
  int ranks = 1;               // p: ranks in each participating group
  int groups = 1;              // groups running the same collective at once
  int64_t payload_bytes = 0;   // S, per rank, as defined above
  double sent_bytes = 0;       // bytes one rank puts on the wire (average over ranks)
  int64_t messages = 0;        // sequential message rounds per rank (the latency count)
};

class CommLog {
 public:
  void add(const CommRecord& r) { records_.push_back(r); }
  const std::vector<CommRecord>& records() const { return records_; }
  size_t size() const { return records_.size(); }
  void reserve(size_t n) { records_.reserve(n); }

 private:
  std::vector<CommRecord> records_;
};

// Per-rank wire cost of the standard algorithms (docs/algorithms.md §8), in bytes
// and message rounds, for p ranks and S bytes (S as in CommRecord).
struct WireCost {
  double sent_bytes;
  int64_t messages;
};
WireCost ring_allreduce_cost(int p, int64_t payload_bytes);
WireCost tree_allreduce_cost(int p, int64_t payload_bytes);  // halving-doubling
WireCost ring_allgather_cost(int p, int64_t payload_bytes);  // also reduce-scatter
WireCost pairwise_alltoall_cost(int p, int64_t payload_bytes);
WireCost tree_broadcast_cost(int p, int64_t payload_bytes);

// A record with every field but the step (Communicator::record sets it).
CommRecord make_comm_record(const char* op, const char* algorithm, const char* dtype,
                            const char* scope, int ranks, int groups, int64_t payload_bytes,
                            WireCost cost);
// The record Communicator::allreduce_mean logs for buffers of `len` elements
// on `workers` workers ("ring" or "tree").
CommRecord allreduce_record(int workers, int64_t len, WireDtype wire, const char* algorithm);
// CommRecord keeps `const char*`: the static name of a wire dtype ("fp32",
// "bits", "int4", ...), or "compressed" for one it does not know.
const char* intern_dtype_name(const std::string& dtype);

// The workers [begin, end) that one rank owns and computes.
struct WorkerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

class Communicator {
 public:
  // Without a transport (or with a one-rank one) this is the simulator: one
  // rank owns every worker. With more ranks the workers are split into
  // contiguous blocks of workers/ranks, rank q owning [q·b, (q+1)·b); every
  // per-worker stage (gradients, optimizers' worker loops, the collectives'
  // worker and server stages) runs on the owner only, and the transport moves
  // the bytes the other ranks need. Throws ConfigError (cluster.workers) when
  // the ranks do not divide the workers.
  explicit Communicator(int workers, Transport* transport = nullptr);

  int workers() const { return workers_; }
  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  bool distributed() const { return ranks_ > 1; }
  WorkerRange local_workers() const { return {rank_ * block_, (rank_ + 1) * block_}; }
  int owner(int worker) const { return worker / block_; }
  Transport& transport() { return transport_ ? *transport_ : local_; }
  const Transport& transport() const {
    return transport_ ? *transport_ : static_cast<const Transport&>(local_);
  }
  void begin_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }
  CommLog& log() { return log_; }
  const CommLog& log() const { return log_; }

  // Exact mean-allreduce of the workers' buffers into `out` (every worker's
  // copy of the result is `out`). `algorithm` ("ring" or "tree") only changes
  // the price: the simulator always sums in its fixed tree order. Departure
  // from a real fp16 NCCL ring, which accumulates in fp16 hop by hop: we round
  // each input and the result to the wire type and accumulate in fp32.
  void allreduce_mean(const WorkerBuffers& in, std::span<float> out, WireDtype wire,
                      const char* algorithm = "ring");

  // out = concatenation of every worker's buffer (n * len values), rounded to
  // the wire type. Across ranks the owners' rows travel in the wire dtype
  // (4 or 2 bytes a value).
  void allgather(const WorkerBuffers& in, std::span<float> out, WireDtype wire);

  // Every worker's buffer becomes the root's, rounded to the wire type.
  // Across ranks the root's owner sends it in the wire dtype.
  void broadcast(const WorkerBuffers& bufs, int root, WireDtype wire);

  // mean_over_workers across ranks, not logged (metrics): each rank gathers
  // every worker's copy of its element range (alltoall), sums it in the
  // simulator's fixed tree order, and the ranges are allgathered. Bit-identical
  // to mean_over_workers on one rank.
  void exact_mean(const WorkerBuffers& in, std::span<float> out, WireDtype wire);

  // Data movement between ranks for the collectives (no-ops on one rank, never
  // logged: the caller records the logical collective). Columns are byte
  // blocks of a per-worker row; `bounds` has ranks()+1 entries.
  //
  // Column blocks owned by server (= worker) index: rank q owns
  // [begin_q·unit_bytes, end_q·unit_bytes). Valid until the next call.
  std::span<const int64_t> server_bounds(int64_t unit_bytes);
  // Rows = workers, row i (global) at base + (i − first_row)·row_stride_bytes,
  // held and written by its owner only. An alltoall: returns this rank's
  // column block [bounds[rank], bounds[rank+1]) of every worker's row, row i
  // at data + i·row_stride. On one rank that is `base` itself (no copy);
  // across ranks it is exchange-sized scratch (workers × block width, not
  // workers × row), valid until the next exchange.
  struct ColumnBlock {
    uint8_t* data;
    size_t row_stride;
  };
  ColumnBlock alltoall_columns(void* base, size_t row_stride_bytes, int first_row,
                               std::span<const int64_t> bounds);
  // One buffer whose block [bounds[q], bounds[q+1]) rank q wrote: afterwards
  // every rank holds all of it (an allgather).
  void gather_columns(void* base, std::span<const int64_t> bounds);
  // Every worker's row (rows contiguous, row_stride_bytes apart) reaches every
  // rank (an allgather of the owners' rows).
  void share_rows(void* base, size_t row_stride_bytes);

  // Node sub-communicators for the hierarchical collectives, node k = workers
  // [k·g, (k+1)·g) with g = node_size, when ranks hold whole shares of nodes
  // (g a multiple of the workers per rank): `node` joins the ranks of this
  // rank's node (node rank = world rank order), `leaders` the first rank of
  // every node (nullptr on the other ranks). Split once per node size (a
  // collective call: every rank reaches it in the same order).
  struct NodeTransports {
    int node_size = 0;
    std::shared_ptr<Transport> node, leaders;  // shared: a Communicator stays copyable
  };
  const NodeTransports& node_transports(int node_size);

  // Reusable staging for the exchanges across ranks (the MPI backend): each call
  // site names its slot; a slot grows to the largest size asked and is then
  // reused, so step() does not allocate once sizes are steady. Contents are
  // left over from earlier use; a span is valid until its slot's next use.
  enum class Staging { kBounds, kCounts, kDispls, kSend, kRecv, kRows, kWide, kResult, kCount };
  template <class T>
  std::span<T> staging(Staging slot, size_t n) {
    static_assert(std::is_trivially_copyable_v<T> && alignof(T) <= alignof(std::max_align_t));
    std::vector<std::max_align_t>& buf = staging_[static_cast<size_t>(slot)];
    const size_t words = (n * sizeof(T) + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t);
    if (buf.size() < words) buf.resize(words);
    return {reinterpret_cast<T*>(buf.data()), n};
  }

  // For collectives built on top (compressed ones): records a collective
  // whose data movement the caller performs itself.
  void record(CommRecord r) {
    r.step = step_;
    log_.add(r);
  }

 private:
  int workers_;
  int rank_ = 0, ranks_ = 1, block_ = 1;
  Transport* transport_ = nullptr;  // nullptr: local_
  LocalTransport local_;
  int64_t step_ = 0;
  CommLog log_;
  std::vector<int64_t> counts_, displs_, rcounts_, rdispls_;  // exchange scratch
  std::vector<uint8_t> send_, recv_;
  std::vector<int64_t> server_bounds_;
  std::array<std::vector<std::max_align_t>, static_cast<size_t>(Staging::kCount)> staging_;
  std::vector<NodeTransports> node_transports_;
};

}  // namespace bitlab
