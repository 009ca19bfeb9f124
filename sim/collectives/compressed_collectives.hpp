// Compressed collectives other than the two-stage 1-bit allreduce
// (onebit_allreduce.hpp). Each computes the math of the exchange on the
// emulated workers' buffers and records every underlying collective in the
// communicator's log, so the network model can price it.
//
// * CompressedAllgatherMean: every worker compresses its buffer with any
//   compressor, the wire images are allgathered and every worker averages the
//   decompressed values: out = (1/n) Σ_i C(x_i). With a node size g it runs
//   hierarchically: an allgather inside each node gives the node mean, the
//   node's leader compresses that mean once more and the leaders allgather
//   across nodes, then each leader broadcasts the gathered images inside its
//   node: out = (1/nodes) Σ_node C(mean_{i in node} C(x_i)). This is the
//   scheme BinSGDM's abstract describes (one bit-vector per node crosses the
//   network) and LoCo's hierarchical option; stage-2 error feedback is left
//   to the caller (not modelled here yet).
//
// * QuantizedReduceScatter: LoCo's exchange of n-bit codes (docs/algorithms.md §6):
//   every worker quantizes its whole buffer (group scales), an alltoall sends
//   chunk r of every worker's codes to worker r, which averages the
//   dequantized chunks, and an allgather returns the averaged chunks to
//   everybody, re-quantized with the same spec ("quantized", default), as fp16
//   or as fp32. Chunks are whole groups: the buffer is padded with zeros to a
//   multiple of n·group_size.
//
// Sums over workers use the communicator's fixed pairwise tree
// (mean_over_workers), so results do not depend on the thread count.
//
// Resident workers (the MPI backend): both take the workers this process runs
// (`local`, default all: the simulator) and hold per-worker rows for those
// only — C(x_i) / Q(x_i) of worker i at row i − local.begin, read through
// compressed() / quantized() with global ids. Under the MPI backend what a
// rank needs of the other workers arrives as wire images and is decoded into
// bounded scratch: the allgather mean decodes one image at a time into the
// depth-first evaluation of the same tree (streamed_mean: log2(n) partial
// sums of d floats, not n rows); the reduce-scatter decodes every worker's
// codes of this rank's chunks only (n × D/ranks floats). run() must then be
// given a Communicator whose local_workers() is `local`.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/state_archive.hpp"

namespace bitlab {

class CompressedAllgatherMean {
 public:
  // node_size 0 or n: flat. Otherwise it must divide n.
  CompressedAllgatherMean(int workers, size_t dim, std::shared_ptr<const Compressor> compressor,
                          int node_size = 0, WorkerRange local = {});

  // out = mean of the compressed buffers (see above). The random streams are
  // RngStream(seed, kCompress, worker, step) (one shared stream, worker 0, when
  // the compressor asks for shared randomness); node leaders' second
  // compression uses worker id n + node.
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out, uint64_t seed,
           int64_t step);

  // The records one run() logs, in log order, for `dim` elements compressed
  // by `compressor` (one image: its wire_bytes(dim) bytes of its wire_dtype()):
  // flat, one allgather of n images; hierarchical, the allgather inside each
  // node, the allgather of one image per node across nodes and the broadcast
  // inside each node.
  static std::vector<CommRecord> plan(int workers, int node_size, size_t dim,
                                      const Compressor& compressor);

  // C(x_i) of the last run, per resident worker (what error feedback
  // subtracts); global worker ids.
  WorkerBuffers compressed() {
    return {compressed_.data(), stride_, d_, n_, local_.begin, local_.size()};
  }
  bool hierarchical() const { return nodes_ > 1 && g_ > 1; }
  int nodes() const { return nodes_; }
  // Bytes of the per-worker and per-node rows held: C(x_i) of the resident
  // workers and the node means this process forms (every node's in the
  // simulator; under MPI those of the nodes the rank leads, none when it
  // leads none). Excludes the receive scratch.
  size_t resident_bytes() const { return (compressed_.size() + node_mean_.size()) * sizeof(float); }
  // The same before construction (the memory check): a compressed row per
  // resident worker and, hierarchical, a node mean per node it leads (every
  // node in the simulator), d floats each.
  static uint64_t resident_bytes_for(int workers, int node_size, int resident, size_t dim) {
    const int g = node_size > 0 ? node_size : 1;
    const bool by_node = workers / g > 1 && g > 1;
    const uint64_t rows = static_cast<uint64_t>(resident) + (by_node ? (resident + g - 1) / g : 0);
    return rows * 4 * uint64_t{dim};
  }
  // Saves or loads the rows a later step may read (a checkpoint).
  void serialize(StateArchive& io);

 private:
  int n_, g_, nodes_;
  size_t d_, stride_;
  WorkerRange local_;  // resident workers
  // Across ranks, hierarchical: node traffic over node sub-communicators
  // (g a multiple or a divisor of the workers per rank; see run).
  bool by_node_ = false;
  int lead_lo_ = 0, lead_hi_ = 0;  // nodes [lead_lo_, lead_hi_) whose means are held
  std::shared_ptr<const Compressor> c_;
  std::vector<CommRecord> records_;  // plan(): what run() logs
  std::vector<float> compressed_;    // local workers × stride
  std::vector<float> node_mean_;     // led nodes × stride (stage 2 input, then C of it)
  // Receive scratch (MPI only): gathered wire images, streamed-tree partial sums.
  std::vector<uint8_t> images_, node_images_;
  std::vector<float> scratch_, inner_scratch_;

  // run()'s steps (compressed_collectives.cpp); Call is one call's inputs.
  struct Call;
  void compress_workers(const Call& call);                       // C(x_i) of resident workers
  void encode_worker(const Call& call, int i, uint8_t* dst) const;  // worker i's wire image
  // Worker i's C(x_i): its row when resident, else decoded from images_
  // (worker `base` at 0).
  void worker_row(const Call& call, int base, int i, std::span<float> dst);
  RngStream leader_rng(const Call& call, int k) const;  // node k's leader's stream
  RngStream worker_rng(const Call& call, int i) const;  // worker i's stream
  void gather_node_images(const Call& call);            // stage 1 across ranks
  void node_mean(const Call& call, int k, std::span<float> dst);  // node k's mean of C(x_i)
  // Stage 2: C(node mean) in place, the leaders' images exchanged.
  void compress_node_means(const Call& call, WorkerBuffers& node_means);
  // out = mean over nodes of C(node mean).
  void mean_of_node_means(const Call& call, const WorkerBuffers& node_means, std::span<float> out);
};

class QuantizedReduceScatter {
 public:
  // gather: "quantized" (re-quantize the averaged chunk with `spec`), "fp16" or "fp32".
  QuantizedReduceScatter(int workers, size_t dim, const QuantizeSpec& spec,
                         std::string gather = "quantized", WorkerRange local = {});

  // quantized_i = Q(x_i) (stage 1, per worker); out = gather-precision of
  // mean_i quantized_i. Streams: RngStream(seed, kCompress, worker, step) for
  // stage 1 and worker id n + r for server r's re-quantization.
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out, uint64_t seed,
           int64_t step);

  // The records one run() logs, in log order: the alltoall of every worker's
  // b-bit codes and group scales (n messages of quantize_wire_bytes(D/n)) and
  // the allgather of the averaged chunks in the gather precision; D is dim
  // padded to a multiple of n·group_size.
  static std::vector<CommRecord> plan(int workers, size_t dim, const QuantizeSpec& spec,
                                      const std::string& gather);

  // Q(x_i) of the last run, per resident worker; global worker ids.
  WorkerBuffers quantized() {
    return {quantized_.data(), stride_, d_, n_, local_.begin, local_.size()};
  }
  // Bytes of the resident workers' Q(x_i) rows (padded length); excludes the
  // receive scratch.
  size_t resident_bytes() const { return quantized_.size() * sizeof(float); }
  // What the constructor allocates (the memory check): a quantized row per
  // resident worker, across ranks every worker's codes of this rank's chunks
  // (as many floats again), and the mean, d floats each (padding left out).
  static uint64_t resident_bytes_for(int workers, int resident, size_t dim) {
    const uint64_t rows = static_cast<uint64_t>(resident) * (resident < workers ? 2 : 1) + 1;
    return rows * 4 * uint64_t{dim};
  }
  size_t padded_dim() const { return D_; }
  // Bytes one worker sends per call.
  double sent_bytes_per_call() const;
  // Saves or loads the last Q(x_i) rows (a checkpoint).
  void serialize(StateArchive& io);

 private:
  int n_;
  size_t d_, D_, stride_;
  WorkerRange local_;  // resident workers (= the servers of their chunks)
  QuantizeSpec spec_;
  std::string gather_;
  std::vector<CommRecord> records_;  // plan(): what run() logs
  std::vector<float> quantized_;     // local workers × stride: Q(x_i) of the padded input
  std::vector<float> columns_;       // MPI only: n × (local chunks), every worker's Q of them
  std::vector<float> mean_;          // D
  std::vector<uint8_t> images_;      // MPI: the resident workers' packed images
  std::vector<uint8_t> gathered_;    // MPI: the servers' gathered chunks

  // run()'s steps, in order.
  // Stage 1: Q(x_i) of each resident worker's zero-padded buffer into
  // quantized_ (across ranks also its packed image into images_).
  void quantize_workers(Communicator& comm, const WorkerBuffers& in, uint64_t seed, int64_t step);
  // The alltoall: this rank's chunks averaged over every worker (mean_).
  void average_chunks(Communicator& comm);
  // Stage 2's precision: the averaged chunks re-quantized (their images into
  // images_ across ranks), rounded to fp16, or left; returns one chunk's
  // wire bytes.
  int64_t requantize_means(Communicator& comm, uint64_t seed, int64_t step);
  // Across ranks: the averaged chunks allgathered in that precision.
  void gather_means(Communicator& comm, int64_t wire2);
  size_t image_bytes() const;        // one worker's packed padded buffer
  int64_t chunk_wire_bytes() const;  // one chunk's packed codes and scales
};

}  // namespace bitlab
