// The communicator: the math of every collective over the emulated workers'
// buffers, and the only place where bytes are counted (design.md, "One
// concept, one place"). Each call appends one CommRecord per underlying
// collective to the run's CommLog; the network model prices that log later,
// never knowing which optimizer produced it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/float16.hpp"

namespace bitlab {

// n buffers of `len` floats, buffer i at data + i * stride (one per worker).
struct WorkerBuffers {
  float* data = nullptr;
  size_t stride = 0;
  size_t len = 0;
  int count = 0;
  std::span<float> operator[](int i) const { return {data + static_cast<size_t>(i) * stride, len}; }
};

// One collective as the network model needs to price it. Sizes follow the cost
// table of algorithms.md §8: for allreduce S = the buffer of one rank; for
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

// Per-rank wire cost of the standard algorithms (algorithms.md §8), in bytes
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
// CommRecord keeps `const char*`: the static name of a wire dtype ("fp32",
// "bits", "int4", ...), or "compressed" for one it does not know.
const char* intern_dtype_name(const std::string& dtype);

// out[k] = (sum_i w(in_i[k])) / n where w() rounds to the wire type, the sum
// runs over workers as a fixed pairwise tree (so n identical buffers, n a power
// of two, give that buffer back exactly), and the result is rounded to the
// wire type. Not logged: this is the arithmetic, used by the communicator and
// by measurements (metrics) that must not count as traffic.
void mean_over_workers(const WorkerBuffers& in, std::span<float> out, WireDtype wire);
// The same tree over n doubles (losses).
double tree_mean(std::span<const double> values);

class Communicator {
 public:
  explicit Communicator(int workers) : workers_(workers) {}

  int workers() const { return workers_; }
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
  // the wire type.
  void allgather(const WorkerBuffers& in, std::span<float> out, WireDtype wire);

  // Every worker's buffer becomes the root's, rounded to the wire type.
  void broadcast(const WorkerBuffers& bufs, int root, WireDtype wire);

  // For collectives built on top (compressed ones): records a collective
  // whose data movement the caller performs itself.
  void record(CommRecord r) {
    r.step = step_;
    log_.add(r);
  }

 private:
  int workers_;
  int64_t step_ = 0;
  CommLog log_;
};

}  // namespace bitlab
