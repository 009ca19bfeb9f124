// The two-stage error-compensated 1-bit allreduce of 1-bit Adam / 1-bit LAMB /
// 0/1 Adam / APMSqueeze (docs/algorithms.md §1; DeepSpeed's compressed_allreduce).
//
//   worker i:  u = pad(b_i) + e_i ; a_i = ‖u‖₂/√D ; e_i = u − a_i·sign(u)
//              signs of u packed MSB first, split into n chunks of D/(8n) bytes
//   phase 1:   alltoall of the sign chunks; allgather of the n scales a_i
//   server r:  y = (1/n) Σ_i a_i·unpack(chunk r of worker i) + s_r
//              c_r = ‖y‖₂/√(D/n) ; s_r = y − c_r·sign(y)
//   phase 2:   allgather of the server sign chunks and of the scales c_r
//   output:    out[r·D/n + k] = c_r·sign_r[k], truncated to d (same on every worker)
//
// With other compressors (set_stages: C1 at the workers, C2 at the servers;
// docs/algorithms.md §1, "Compressor per stage") every chunk is its own image:
//   worker i:  u = pad(b_i) + e_i ; w_i[r] = C1(u[r]) per chunk r ; e_i = u − w_i
//   phase 1:   alltoall of the images C1(u[r]) (n·|C1(D/n)| bytes a worker)
//   server r:  y = s_r + (Σ_i w_i[r]) / n  (worker order, fp32) ;
//              c_r = C2(y) ; s_r = y − c_r
//   phase 2:   allgather of the server images (n·|C2(D/n)| bytes)
//   output:    out[r·D/n + k] = c_r[k], truncated to d
// A stage without error feedback keeps its error at zero. Across ranks (the
// MPI backend) phase 1 carries each chunk's C1 wire image (Compressor::encode,
// drawn from the same stream as apply) to the chunk's server, which decodes
// it (decode(encode(x)) == C1(x) bit for bit), and phase 2 carries each
// server's C2 image to every rank: the stages' own images, not the sign's.
// Stochastic compressors draw from RngStream(seed, kCompress, word, step) with word =
// i·n + r for worker i's chunk r (r alone when the compressor shares its
// randomness: every worker the same stream) and n·n + r for server r.
//
// D is d padded to a multiple of `pad_multiple` (default: the reference's
// n·lcm(n, 8); 8n is the least that makes every chunk whole bytes). The
// padding is fresh zeros on every call (1-bit Adam, 0/1 Adam), or, with
// set_pad_reuse(true), what the previous call decoded there (1-bit LAMB's
// reference keeps its padding inside its persistent fused momentum buffer).
//
// OneBitAllreduceSet runs one such collective per slice of the buffer (per
// tensor, or one for the whole buffer): the reference's per-parameter calls
// (docs/algorithms.md §1, "Granularity").
// Sums over workers on the server run in worker order 0..n−1 in fp32; norms
// are accumulated in double over fixed blocks, so results do not depend on the
// thread count.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/core/state_archive.hpp"
#include "sim/kernels/elements.hpp"

namespace bitlab {

// Worker inputs formed on the fly, for 1-bit Adam's compression stage
// (Tang et al. 2021, Alg. 1): b_i = onebit_adam_local_momentum(m, g_i) =
// β1·m + (1−β1)·g_i, with m shared by every worker. run_momentum() is run() on
// these b_i bit for bit, without writing them out: the worker stage reads m
// and g_i once, in one pass (cpu::onebit_adam_worker_block).
struct OneBitMomentumInput {
  const float* m = nullptr;  // the shared momentum, one float per element
  WorkerBuffers g;           // the workers' gradients, indexed as run()'s input
  AdamCoeffs c;              // β1 and 1 − β1 as the element update uses them
};

// One stage (worker or server) of the compressed allreduce: its compressor
// and whether it keeps an error. A null compressor is the reference's scaled
// sign (docs/algorithms.md §1, "Compressor per stage").
struct OneBitStage {
  std::shared_ptr<const Compressor> compressor;
  bool error_feedback = true;
  bool is_scaled_sign() const { return !compressor; }
  // The compressor, or with none the sign compressor (the scaled sign's
  // wire: what the stage's records and images are sized by).
  const Compressor& compressor_or_sign() const;
};

// The reference padding multiple n·lcm(n, 8).
size_t onebit_reference_pad_multiple(int workers);
// D for d elements (pad_multiple 0 = the reference's).
size_t onebit_padded_dim(size_t dim, int workers, size_t pad_multiple = 0);

class OneBitAllreduce {
 public:
  // pad_multiple must be a multiple of 8n (so chunks are whole bytes); 0 picks
  // the reference's n·lcm(n, 8). `local`: the workers (= servers) this
  // process runs (default: all, the simulator); it holds the worker errors,
  // sign bits and server state of those only, so under the MPI backend the
  // per-rank memory scales with workers/ranks. run() must then be given a
  // Communicator whose local_workers() is this range.
  OneBitAllreduce(int workers, size_t dim, size_t pad_multiple = 0, WorkerRange local = {});

  int workers() const { return n_; }
  size_t dim() const { return d_; }
  size_t padded_dim() const { return D_; }
  size_t chunk() const { return D_ / n_; }

  // With error feedback off, every call starts from zero errors (plain scaled
  // sign compression at both stages): the ablation that shows what the error
  // compensation buys (1-bit Adam, Tang et al. 2021, §3).
  void set_error_feedback(bool on) { worker_.error_feedback = server_.error_feedback = on; }
  bool error_feedback() const { return worker_.error_feedback && server_.error_feedback; }
  // The compressor of each stage and its error feedback. Both reference
  // (null) is the reference path above, whatever the error feedback flags;
  // anything else runs the per-chunk form (across ranks too: its images
  // travel, see the top of this file).
  void set_stages(const OneBitStage& worker, const OneBitStage& server);
  bool general() const { return !worker_.is_scaled_sign() || !server_.is_scaled_sign(); }

  // Bytes one allreduce of `dim` values holds on a process with `resident`
  // of the `workers` workers (the memory check's estimate, before anything is
  // allocated), for the padded D of `dim` (onebit_padded_dim): per resident worker its error e (4 bytes a
  // value), signs (1/8) and its server chunk's error s and accumulator (8/n);
  // the server's signs (1/8); and with general stages (not the reference
  // sign) the resident workers' images w (4 a value each) and the decoded
  // mean (4); across ranks also every worker's decoded images of the
  // resident servers' chunks (4 per resident worker) and the resident
  // workers' wire images (at most 8 a value each: topk's value and index).
  static uint64_t resident_bytes_for(int workers, int resident, size_t dim, bool general,
                                     size_t pad_multiple = 0);

  // Padding of each call: fresh zeros (false, the default) or the D − d
  // values the previous call decoded there (true; zeros before the first call
  // and after reset_errors()).
  void set_pad_reuse(bool on);
  bool pad_reuse() const { return pad_reuse_; }
  // The padding the next call starts from (D − d values; empty unless reused).
  std::span<const float> padding() const { return pad_; }

  // Zeroes every worker and server error and a reused padding (done at the
  // switch to compression and, in 0/1 Adam, at the transition to local steps).
  void reset_errors();
  // Saves or loads the worker and server errors, the last scales and a reused
  // padding (a checkpoint: sim/core/state_archive.hpp); entries are named
  // `prefix`.worker_errors etc.
  void serialize(StateArchive& io, const std::string& prefix = "onebit");

  // One call of §1 on the workers' buffers (each dim() floats). Writes the
  // result, identical on every worker, to `out` (dim() floats; may alias no
  // input) and records the four collectives in comm's log.
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out);
  // The same; `seed` and `step` address the streams of stochastic compressors.
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out, uint64_t seed,
           int64_t step);
  // run() on the inputs b_i of `momentum` (reference stages only: general()
  // is false; std::logic_error otherwise).
  void run_momentum(Communicator& comm, const OneBitMomentumInput& momentum, std::span<float> out);

  // The same call in three parts, for a caller that forms each worker's input
  // as its gradient is made and holds no n × d rows (1-bit Adam on a streamed
  // cluster): begin(); then add_worker() or add_worker_momentum() once for
  // every local worker, in any order, distinct workers concurrently from any
  // threads (each writes only its own error row, signs and scale); then
  // finish(). run() and run_momentum() are exactly these, so the bits do not
  // depend on the order or the threads. `momentum`: the inputs come through
  // add_worker_momentum (reference stages only); `seed` and `step` address
  // the streams of stochastic compressors.
  void begin(bool momentum, uint64_t seed = 0, int64_t step = 0);
  // Worker i's input b_i (dim() floats): its worker stage (u = pad(b_i) + e_i,
  // compressed; e_i = u − C1(u)).
  void add_worker(int i, std::span<const float> b);
  // Worker i's input b_i = onebit_adam_local_momentum(m, g_i), formed inside
  // the fused kernel (cpu::onebit_adam_worker_block, checked bit for bit
  // against add_worker on the written-out b_i by test_kernels), its error
  // update deferred to the next call. Parallel over the blocks of the row
  // when called outside a parallel region.
  void add_worker_momentum(int i, const float* m, const float* g, const AdamCoeffs& c);
  // Phase 1, the servers, phase 2 (the records in comm's log) and the output
  // `out` (dim() floats), as run().
  void finish(Communicator& comm, std::span<float> out);

  // The four records one run() logs for `dim` elements on `workers` workers, in
  // log order (the closed form an optimizer's comm_plan states; run() logs
  // exactly these): alltoall of the sign chunks (S = D/8), allgather of the
  // scales (S = 4n), allgather of the server signs (D/8) and scales (4n).
  static std::vector<CommRecord> plan(int workers, size_t dim, size_t pad_multiple = 0);
  // The records of one run() with these stages: plan() above when both are
  // the reference; otherwise two: the alltoall of the worker images
  // (S = n·C1.wire_bytes(D/n), C1's wire dtype) and the allgather of the server
  // images (S = n·C2.wire_bytes(D/n)); a null compressor counts as `sign`.
  static std::vector<CommRecord> plan(int workers, size_t dim, size_t pad_multiple,
                                      const OneBitStage& worker, const OneBitStage& server);

  // What worker `w` reconstructs from the phase-2 image it received; equals
  // `out` of run() (each worker decodes the same gathered bytes).
  void decode_for(int worker, std::span<float> out) const;

  // Worker / server i must be local.
  std::span<const float> worker_error(int i) const {
    settle();
    return {e_.data() + static_cast<size_t>(i - local_.begin) * D_, D_};
  }
  std::span<const float> server_error(int r) const {
    return {s_.data() + static_cast<size_t>(r - local_.begin) * chunk(), chunk()};
  }
  float worker_scale(int i) const { return a_[i]; }
  float server_scale(int r) const { return c_[r]; }
  // Packed signs of u for worker i (D/8 bytes) and the servers' (D/8 bytes).
  std::span<const uint8_t> worker_bits(int i) const {
    return {bits_.data() + static_cast<size_t>(i - local_.begin) * (D_ / 8), D_ / 8};
  }
  std::span<const uint8_t> server_bits() const { return server_bits_; }

  // Bytes held in the per-worker / per-server arrays (errors, sign bits,
  // server sums): proportional to the local workers.
  size_t resident_bytes() const {
    return (e_.size() + s_.size() + acc_.size() + w_.size() + decoded_.size() + columns_.size()) *
               sizeof(float) +
           bits_.size() + images_.size() + server_images_.size();
  }

  // Bytes one worker sends per call: 2·(n−1)·D/(8n) + 2·4·(n−1) (reference);
  // (n−1)·(C1.wire_bytes(D/n) + C2.wire_bytes(D/n)) otherwise.
  int64_t sent_bytes_per_call() const;

 private:
  // run(): begin, every local worker's add_worker (parallel), finish.
  void run_impl(Communicator& comm, const WorkerBuffers& in, std::span<float> out, uint64_t seed,
                int64_t step);
  // Applies a deferred error update: e_i = u − a_i·sign(u) from what e_,
  // bits_ and a_ hold after add_worker_momentum(). Called before anything
  // else reads or writes e_ (const: worker_error() reads it); settle_row()
  // for one row (local index).
  void settle() const;
  void settle_row(size_t row) const;
  // The per-chunk form's worker stage for worker i (e_ row already holds e_i
  // and a reused padding).
  void compress_worker_general(int i, std::span<const float> b);
  // The per-chunk form's phases 1 and 2 (finish()): the resident servers
  // reduce every worker's C1 chunk (across ranks received as wire images),
  // and their C2 images reach every rank.
  void finish_general(Communicator& comm, std::span<float> out);
  void reduce_servers(const float* w, size_t row_stride, int first_server);
  // The streams a stochastic stage draws from (header): worker i's C1 of
  // chunk r, and server r's C2; a receiver decodes with the sender's.
  RngStream worker_stream(const Compressor& c1, int i, int r) const;
  RngStream server_stream(int r) const;
  bool distributed() const { return local_.size() < n_; }
  int64_t worker_image_bytes() const;  // |C1(D/n)|
  int64_t server_image_bytes() const;  // |C2(D/n)|

  std::vector<CommRecord> records_;  // plan(): what run() logs
  int n_;
  size_t d_, D_;
  size_t pad_multiple_;
  WorkerRange local_;  // resident workers (and servers)
  OneBitStage worker_, server_;
  std::vector<float> w_;        // general: local × D, C1 of each worker's chunks
  std::vector<float> decoded_;  // general: D, C2 of every server's chunk
  // General across ranks: every worker's C1 of the resident servers' chunks,
  // decoded (n × local·D/n; worker i's row at i·local·D/n), and the wire
  // images: the resident workers' C1 chunk images (local × n), then the
  // resident servers' C2 images (grown once, reused).
  std::vector<float> columns_;
  std::vector<uint8_t> images_, server_images_;
  // local × D worker errors; after run_momentum() the workers' u, with
  // e_i = u − a_i·sign(u) pending (settle()).
  mutable std::vector<float> e_;
  mutable bool pending_ = false;
  // Between begin() and finish(): the rows still hold the last call's
  // deferred error update (each add applies it to its own row), whether the
  // inputs come through add_worker_momentum, and the streams' address.
  bool deferred_ = false;
  bool momentum_call_ = false;
  uint64_t seed_ = 0;
  int64_t step_ = 0;
  std::vector<double> partial_;       // add_worker_momentum: local × blocks sums of squares
  std::vector<float> s_;              // local × D/n server errors (all: D)
  std::vector<uint8_t> bits_;         // local × D/8 packed signs of u
  std::vector<uint8_t> server_bits_;  // D/8: chunk r at r·D/(8n)
  std::vector<float> a_, c_;          // worker and server scales
  std::vector<float> acc_;            // local × D/n: the servers' sums over workers
  bool pad_reuse_ = false;
  std::vector<float> pad_;  // D − d: the reused padding (empty when not reused)
};

// One slice [offset, offset + size) of the buffer, compressed on its own.
struct OneBitSlice {
  size_t offset = 0;
  size_t size = 0;
};

// One OneBitAllreduce per slice, run one after another in slice order (each
// its own padding, errors, scales and four collectives). The slices tile
// [0, dim) in order. One slice covering everything is the plain collective,
// bit for bit, with the same checkpoint entries.
class OneBitAllreduceSet {
 public:
  OneBitAllreduceSet(int workers, const std::vector<OneBitSlice>& slices, size_t pad_multiple = 0,
                     WorkerRange local = {});

  size_t size() const { return parts_.size(); }
  const OneBitAllreduce& part(size_t p) const { return parts_[p]; }
  const OneBitSlice& slice(size_t p) const { return slices_[p]; }
  size_t dim() const { return dim_; }
  // Σ of the parts' padded dims.
  size_t padded_dim() const;

  void set_error_feedback(bool on);
  void set_stages(const OneBitStage& worker, const OneBitStage& server);
  void set_pad_reuse(bool on);
  void reset_errors();
  // One slice: the entries of OneBitAllreduce::state ("onebit.*"); several:
  // "onebit.<p>.*" for slice p.
  void serialize(StateArchive& io);

  // Each slice's OneBitAllreduce::run on that slice of `in` and `out`, in
  // slice order: 4 records per slice in comm's log.
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out);
  // The same with the streams of stochastic compressors: slice p uses seed
  // p = 0 ? seed : splitmix64(seed ^ p).
  void run(Communicator& comm, const WorkerBuffers& in, std::span<float> out, uint64_t seed,
           int64_t step);
  // Each slice's OneBitAllreduce::run_momentum on that slice of m, the
  // gradients and `out`, in slice order (reference stages only).
  void run_momentum(Communicator& comm, const OneBitMomentumInput& momentum, std::span<float> out);
  // The three parts of run() (OneBitAllreduce::begin etc.), every slice: b
  // and g are the whole buffer's; slice p's stochastic streams use seed
  // p = 0 ? seed : splitmix64(seed ^ p), as run().
  void begin(bool momentum, uint64_t seed = 0, int64_t step = 0);
  void add_worker(int i, std::span<const float> b);
  void add_worker_momentum(int i, const float* m, const float* g, const AdamCoeffs& c);
  void finish(Communicator& comm, std::span<float> out);
  // Whether the slices run the per-chunk form (a compressor other than the
  // reference sign at either stage): then run_momentum() is refused.
  bool general() const { return parts_.front().general(); }

  // The records of one run(): OneBitAllreduce::plan of each slice size, in
  // slice order.
  static std::vector<CommRecord> plan(int workers, const std::vector<int64_t>& sizes,
                                      size_t pad_multiple = 0, const OneBitStage& worker = {},
                                      const OneBitStage& server = {});

  int64_t sent_bytes_per_call() const;
  size_t resident_bytes() const;

 private:
  std::vector<OneBitSlice> slices_;
  std::vector<OneBitAllreduce> parts_;
  size_t dim_ = 0;
};

}  // namespace bitlab
