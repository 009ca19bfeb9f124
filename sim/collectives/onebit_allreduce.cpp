#include "sim/collectives/onebit_allreduce.hpp"

#include <omp.h>

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sim/collectives/rank_messages.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/core/rng.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

size_t onebit_reference_pad_multiple(int n) {
  return static_cast<size_t>(n) * std::lcm(static_cast<size_t>(n), size_t{8});
}

size_t onebit_padded_dim(size_t dim, int n, size_t pad_multiple) {
  const size_t m = pad_multiple ? pad_multiple : onebit_reference_pad_multiple(n);
  return (dim + m - 1) / m * m;
}

std::vector<CommRecord> OneBitAllreduce::plan(int n, size_t dim, size_t pad_multiple) {
  const size_t D = onebit_padded_dim(std::max<size_t>(dim, 1), n, pad_multiple);
  const auto bits = static_cast<int64_t>(D / 8);
  const int64_t scales = 4 * static_cast<int64_t>(n);
  return {
      make_comm_record("alltoall", "pairwise", "bits", "all", n, 1, bits,
                       pairwise_alltoall_cost(n, bits)),
      make_comm_record("allgather", "ring", "fp32", "all", n, 1, scales,
                       ring_allgather_cost(n, scales)),
      make_comm_record("allgather", "ring", "bits", "all", n, 1, bits,
                       ring_allgather_cost(n, bits)),
      make_comm_record("allgather", "ring", "fp32", "all", n, 1, scales,
                       ring_allgather_cost(n, scales)),
  };
}

const Compressor& OneBitStage::compressor_or_sign() const {
  static const SignCompressor kSign;
  return compressor ? *compressor : kSign;
}

std::vector<CommRecord> OneBitAllreduce::plan(int n, size_t dim, size_t pad_multiple,
                                              const OneBitStage& worker,
                                              const OneBitStage& server) {
  if (worker.is_scaled_sign() && server.is_scaled_sign()) return plan(n, dim, pad_multiple);
  const Compressor& c1 = worker.compressor_or_sign();
  const Compressor& c2 = server.compressor_or_sign();
  const size_t chunk = onebit_padded_dim(std::max<size_t>(dim, 1), n, pad_multiple) / n;
  const int64_t s1 = c1.wire_bytes(chunk) * n, s2 = c2.wire_bytes(chunk) * n;
  return {
      make_comm_record("alltoall", "pairwise", intern_dtype_name(c1.wire_dtype()), "all", n, 1, s1,
                       pairwise_alltoall_cost(n, s1)),
      make_comm_record("allgather", "ring", intern_dtype_name(c2.wire_dtype()), "all", n, 1, s2,
                       ring_allgather_cost(n, s2)),
  };
}

OneBitAllreduce::OneBitAllreduce(int workers, size_t dim, size_t pad_multiple, WorkerRange local)
    : n_(workers),
      d_(dim),
      pad_multiple_(pad_multiple),
      local_(local.size() > 0 ? local : WorkerRange{0, workers}) {
  if (workers < 1) throw std::invalid_argument("OneBitAllreduce: workers must be >= 1");
  if (pad_multiple % (8 * static_cast<size_t>(workers)) != 0) {
    throw std::invalid_argument("OneBitAllreduce: pad_multiple " + std::to_string(pad_multiple) +
                                " must be a multiple of 8n = " + std::to_string(8 * workers));
  }
  D_ = onebit_padded_dim(std::max<size_t>(dim, 1), workers, pad_multiple);
  records_ = plan(workers, dim, pad_multiple);
  const size_t resident = static_cast<size_t>(local_.size());
  e_.assign(D_ * resident, 0.0f);
  s_.assign(D_ / n_ * resident, 0.0f);
  bits_.assign(D_ / 8 * resident, 0);
  server_bits_.assign(D_ / 8, 0);
  a_.assign(n_, 0.0f);
  c_.assign(n_, 0.0f);
  acc_.assign(D_ / n_ * resident, 0.0f);
  partial_.assign((D_ + kSumBlock - 1) / kSumBlock * resident, 0.0);
}

uint64_t OneBitAllreduce::resident_bytes_for(int workers, int resident, size_t dim, bool general,
                                             size_t pad_multiple) {
  // e_, bits_ and the block sums per resident worker, s_ and acc_ per
  // resident server (D/n each); server_bits_; general: w_ and decoded_.
  const double D =
      static_cast<double>(onebit_padded_dim(std::max<size_t>(dim, 1), workers, pad_multiple));
  const double per_worker = 4.0 + 0.125 + 8.0 / kSumBlock + 8.0 / workers;
  double bytes = D * (per_worker * resident + 0.125);
  if (general) bytes += D * (4.0 * resident + 4.0);
  // Across ranks: every worker's decoded C1 of the resident servers' chunks
  // (D/n each, n workers, per resident server) and the wire images, at most
  // 8 bytes a value (topk's value and index), of the resident workers.
  if (general && resident < workers) bytes += D * (4.0 + 8.0) * resident;
  return static_cast<uint64_t>(bytes);
}

void OneBitAllreduce::set_stages(const OneBitStage& worker, const OneBitStage& server) {
  worker_ = worker;
  server_ = server;
  records_ = plan(n_, d_, pad_multiple_, worker_, server_);
  const size_t resident = static_cast<size_t>(local_.size());
  w_.assign(general() ? resident * D_ : 0, 0.0f);
  decoded_.assign(general() ? D_ : 0, 0.0f);
  const bool across = general() && distributed();
  columns_.assign(across ? resident * D_ : 0, 0.0f);
  images_.assign(across ? resident * n_ * static_cast<size_t>(worker_image_bytes()) : 0, 0);
  server_images_.assign(across ? n_ * static_cast<size_t>(server_image_bytes()) : 0, 0);
}

int64_t OneBitAllreduce::worker_image_bytes() const {
  return worker_.compressor_or_sign().wire_bytes(chunk());
}

int64_t OneBitAllreduce::server_image_bytes() const {
  return server_.compressor_or_sign().wire_bytes(chunk());
}

void OneBitAllreduce::set_pad_reuse(bool on) {
  pad_reuse_ = on;
  pad_.assign(on ? D_ - d_ : 0, 0.0f);
}

void OneBitAllreduce::reset_errors() {
  std::fill(e_.begin(), e_.end(), 0.0f);
  pending_ = false;
  std::fill(s_.begin(), s_.end(), 0.0f);
  std::fill(pad_.begin(), pad_.end(), 0.0f);
}

int64_t OneBitAllreduce::sent_bytes_per_call() const {
  const int64_t n = n_, D = static_cast<int64_t>(D_);
  if (general()) {
    // Each record's S is n images; a worker keeps its own: (n−1)/n of it.
    return (n - 1) * (records_[0].payload_bytes + records_[1].payload_bytes) / n;
  }
  return 2 * (n - 1) * D / (8 * n) + 2 * 4 * (n - 1);
}

void OneBitAllreduce::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out) {
  run(comm, in, out, 0, 0);
}

void OneBitAllreduce::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                          uint64_t seed, int64_t step) {
  run_impl(comm, in, out, seed, step);
}

void OneBitAllreduce::run_momentum(Communicator& comm, const OneBitMomentumInput& momentum,
                                   std::span<float> out) {
  begin(true);
  // Row by row, each row parallel over its blocks (add_worker_momentum).
  for (int i = local_.begin; i < local_.end; ++i) {
    add_worker_momentum(i, momentum.m, momentum.g[i].data(), momentum.c);
  }
  finish(comm, out);
}

void OneBitAllreduce::run_impl(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                               uint64_t seed, int64_t step) {
  begin(false, seed, step);
#pragma omp parallel for schedule(static)
  for (int i = local_.begin; i < local_.end; ++i) add_worker(i, in[i]);
  finish(comm, out);
}

void OneBitAllreduce::begin(bool momentum, uint64_t seed, int64_t step) {
  if (momentum && general()) {
    throw std::logic_error(
        "OneBitAllreduce: the momentum inputs are formed in the reference stage's kernel; "
        "other compressors need them written out (add_worker)");
  }
  // The errors only: a reused padding is not an error.
  if (!worker_.error_feedback) {
    std::fill(e_.begin(), e_.end(), 0.0f);
    pending_ = false;
  }
  if (!server_.error_feedback) std::fill(s_.begin(), s_.end(), 0.0f);
  deferred_ = pending_;  // each add settles (or carries) its own row
  pending_ = false;
  momentum_call_ = momentum;
  seed_ = seed;
  step_ = step;
}

// Worker side, one worker: u = pad(b_i) + e_i ; a_i = ‖u‖/√D ; e_i = u − a_i
// sign(u) (the reference), or per chunk (general()).
void OneBitAllreduce::add_worker(int i, std::span<const float> b) {
  const size_t row = static_cast<size_t>(i - local_.begin), D = D_, d = d_;
  float* e = e_.data() + row * D;
  if (deferred_) settle_row(row);
  // A reused padding enters through the worker error: the kernel forms
  // u = e + b with b = 0 past d, so u = (e + pad) there, the reference's
  // pad + e (one IEEE addition, commutative).
  if (pad_reuse_) {
    for (size_t k = 0; k < D - d; ++k) e[d + k] += pad_[k];
  }
  if (general()) {
    compress_worker_general(i, b);
    return;
  }
  // The CPU twin of the CUDA kernel (sim/kernels/).
  cpu::onebit_worker_compress(b.data(), d, e, D, bits_.data() + row * (D / 8), &a_[i]);
}

void OneBitAllreduce::add_worker_momentum(int i, const float* m, const float* g,
                                          const AdamCoeffs& c) {
  const size_t row = static_cast<size_t>(i - local_.begin), D = D_, d = d_;
  const size_t blocks = (D + kSumBlock - 1) / kSumBlock;
  float* e = e_.data() + row * D;
  // The deferred update rides in this pass, unless a reused padding must be
  // added to the settled error first.
  const bool prev = deferred_ && !pad_reuse_;
  if (deferred_ && pad_reuse_) settle_row(row);
  if (pad_reuse_) {
    for (size_t k = 0; k < D - d; ++k) e[d + k] += pad_[k];
  }
  float table[2048];  // ±a_i of the previous call per sign byte
  if (prev) cpu::onebit_sign_table(a_[i], table);
  double* part = partial_.data() + row * blocks;
  uint8_t* bits = bits_.data() + row * (D / 8);
  const auto nb = static_cast<int64_t>(blocks);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && nb > 1)
  for (int64_t blk = 0; blk < nb; ++blk) {
    part[blk] = cpu::onebit_adam_worker_block(m, g, d, c, e, D, bits, prev ? table : nullptr,
                                              static_cast<size_t>(blk));
  }
  // The block sums in block order, as onebit_worker_compress adds them.
  double ss = 0.0;
  for (size_t blk = 0; blk < blocks; ++blk) ss += part[blk];
  a_[i] = static_cast<float>(std::sqrt(ss / static_cast<double>(D)));
}

void OneBitAllreduce::finish(Communicator& comm, std::span<float> out) {
  const int n = n_;
  const size_t D = D_, d = d_, chunk = D_ / n_, chunk_bytes = chunk / 8;
  pending_ = momentum_call_;  // the momentum rows hold u, their error update deferred
  deferred_ = false;
  // Workers and servers this rank owns (all of them in the simulator).
  const WorkerRange mine = comm.local_workers();
  if (mine.begin != local_.begin || mine.end != local_.end) {
    throw std::logic_error("OneBitAllreduce: built for workers [" + std::to_string(local_.begin) +
                           ", " + std::to_string(local_.end) + "), run on [" +
                           std::to_string(mine.begin) + ", " + std::to_string(mine.end) + ")");
  }
  if (general()) {
    finish_general(comm, out);
    return;
  }
  const size_t first = static_cast<size_t>(mine.begin);

  // ---- phase 1: alltoall of sign chunks (S = D/8 bytes a worker sends in
  // all, its own chunk included) and allgather of the n fp32 scales.
  // Across ranks: server r's chunk of every worker's signs goes to r's owner,
  // into exchange-sized scratch (n × my servers' chunks; on one rank bits_).
  const Communicator::ColumnBlock signs = comm.alltoall_columns(
      bits_.data(), D / 8, mine.begin, comm.server_bounds(static_cast<int64_t>(chunk_bytes)));
  comm.gather_columns(a_.data(), comm.server_bounds(sizeof(float)));
  comm.record(records_[0]);
  comm.record(records_[1]);

  // ---- server side, server r owns elements [r·D/n, (r+1)·D/n).
#pragma omp parallel for schedule(static)
  for (int srv = mine.begin; srv < mine.end; ++srv) {
    cpu::onebit_server_reduce(signs.data + (srv - first) * chunk_bytes, signs.row_stride, a_.data(),
                              n, chunk, s_.data() + (srv - first) * chunk,
                              acc_.data() + (srv - first) * chunk,
                              server_bits_.data() + srv * chunk_bytes, &c_[srv]);
  }

  // ---- phase 2: allgather of the server sign chunks (S = D/8 gathered) and
  // of the server scales.
  comm.gather_columns(server_bits_.data(), comm.server_bounds(static_cast<int64_t>(chunk_bytes)));
  comm.gather_columns(c_.data(), comm.server_bounds(sizeof(float)));
  comm.record(records_[2]);
  comm.record(records_[3]);

  decode_for(0, out);
  if (pad_reuse_) {
    // What every worker decodes past d (onebit_decode's element rule).
    for (size_t k = d; k < D; ++k) {
      const float cr = c_[k / chunk];
      pad_[k - d] = (server_bits_[k / 8] >> (7 - k % 8)) & 1u ? cr : -cr;
    }
  }
}

void OneBitAllreduce::settle() const {
  if (!pending_) return;
  for (size_t row = 0; row < static_cast<size_t>(local_.size()); ++row) settle_row(row);
  pending_ = false;
}

void OneBitAllreduce::settle_row(size_t row) const {
  float table[2048];
  cpu::onebit_sign_table(a_[local_.begin + static_cast<int>(row)], table);
  cpu::onebit_settle_error(e_.data() + row * D_, D_, bits_.data() + row * (D_ / 8), table);
}

// The per-chunk form (header): worker i compresses each chunk r of
// u = pad(b_i) + e_i on its own. e_ already holds e_i (+ a reused padding).
// Across ranks each chunk's wire image is encoded from the same stream.
void OneBitAllreduce::compress_worker_general(int i, std::span<const float> b) {
  const int n = n_;
  const size_t D = D_, d = d_, chunk = D_ / n_, row = static_cast<size_t>(i - local_.begin);
  const Compressor* c1 = &worker_.compressor_or_sign();
  const size_t unit = distributed() ? static_cast<size_t>(worker_image_bytes()) : 0;
  float* u = e_.data() + row * D;
  float* w = w_.data() + row * D;
  for (size_t k = 0; k < d; ++k) u[k] += b[k];
  for (int r = 0; r < n; ++r) {
    const RngStream rng = worker_stream(*c1, i, r);
    c1->apply({u + r * chunk, chunk}, {w + r * chunk, chunk}, rng);
    if (unit > 0) {
      c1->encode({u + r * chunk, chunk}, {images_.data() + (row * n + r) * unit, unit}, rng);
    }
  }
  for (size_t k = 0; k < D; ++k) u[k] -= w[k];  // e_i = u − C1(u)
}

// Phases 1 and 2 of the per-chunk form. One rank holds every image, so
// nothing moves: the records are what the wire carries (each compressor's
// exact image). Across ranks worker i's image of chunk r goes to r's owner
// and is decoded into columns_ (the resident workers' own C1 rows are
// copied in), then the servers' C2 images are allgathered and decoded.
void OneBitAllreduce::finish_general(Communicator& comm, std::span<float> out) {
  const size_t chunk = D_ / n_;
  comm.record(records_[0]);
  if (!distributed()) {
    reduce_servers(w_.data(), D_, 0);
  } else {
    const size_t width = static_cast<size_t>(local_.size()) * chunk;
    const size_t unit1 = static_cast<size_t>(worker_image_bytes());
    const Compressor& c1 = worker_.compressor_or_sign();
    for (int i = local_.begin; i < local_.end; ++i) {
      const float* w = w_.data() + static_cast<size_t>(i - local_.begin) * D_;
      std::copy(w + local_.begin * chunk, w + local_.end * chunk,
                columns_.data() + static_cast<size_t>(i) * width);
    }
    alltoall_messages(
        comm, static_cast<int64_t>(unit1),
        [&](int i, int r, uint8_t* dst) {
          const size_t at = (static_cast<size_t>(i - local_.begin) * n_ + r) * unit1;
          std::copy(images_.data() + at, images_.data() + at + unit1, dst);
        },
        [&](int i, int r, const uint8_t* src) {
          c1.decode_shared({src, unit1},
                           {columns_.data() + static_cast<size_t>(i) * width +
                                static_cast<size_t>(r - local_.begin) * chunk,
                            chunk},
                           worker_stream(c1, i, r));
        });
    reduce_servers(columns_.data(), width, local_.begin);
  }
  comm.record(records_[1]);
  if (distributed()) {
    const int64_t unit2 = server_image_bytes();
    const Compressor& c2 = server_.compressor_or_sign();
    allgather_messages(
        comm, unit2, server_images_, [](int, uint8_t*) {},  // encoded by reduce_servers
        [&](int r, const uint8_t* src) {
          c2.decode_shared({src, static_cast<size_t>(unit2)}, {decoded_.data() + r * chunk, chunk},
                           server_stream(r));
        });
  }
  std::copy(decoded_.begin(), decoded_.begin() + static_cast<std::ptrdiff_t>(d_), out.begin());
  if (pad_reuse_)
    std::copy(decoded_.begin() + static_cast<std::ptrdiff_t>(d_), decoded_.end(), pad_.begin());
}

RngStream OneBitAllreduce::worker_stream(const Compressor& c1, int i, int r) const {
  const auto word = static_cast<uint32_t>((c1.shared_randomness() ? 0 : i) * n_ + r);
  return RngStream(seed_, Purpose::kCompress, word, static_cast<uint64_t>(step_));
}

RngStream OneBitAllreduce::server_stream(int r) const {
  return RngStream(seed_, Purpose::kCompress, static_cast<uint32_t>(n_ * n_ + r),
                   static_cast<uint64_t>(step_));
}

// Resident server r: y = s_r + (Σ_i w_i[r]) / n in worker order, c_r =
// C2(y), s_r = y − c_r; c_r lands in decoded_ (every worker's phase-2
// image), across ranks also its wire image in server_images_. Worker i's C1
// of chunk r is at w + i·row_stride + (r − first_server)·chunk.
void OneBitAllreduce::reduce_servers(const float* w, size_t row_stride, int first_server) {
  const int n = n_;
  const size_t chunk = D_ / n_;
  const Compressor* c2 = &server_.compressor_or_sign();
  const float nf = static_cast<float>(n);
  const size_t unit2 = distributed() ? static_cast<size_t>(server_image_bytes()) : 0;
#pragma omp parallel for schedule(static)
  for (int r = local_.begin; r < local_.end; ++r) {
    const size_t srow = static_cast<size_t>(r - local_.begin);
    float* acc = acc_.data() + srow * chunk;
    float* y = s_.data() + srow * chunk;
    float* c = decoded_.data() + r * chunk;
    std::fill(acc, acc + chunk, 0.0f);
    for (int i = 0; i < n; ++i) {  // fixed worker order
      const float* wi = w + static_cast<size_t>(i) * row_stride +
                        static_cast<size_t>(r - first_server) * chunk;
      for (size_t k = 0; k < chunk; ++k) acc[k] += wi[k];
    }
    for (size_t k = 0; k < chunk; ++k) y[k] += acc[k] / nf;
    const RngStream rng = server_stream(r);
    c2->apply({y, chunk}, {c, chunk}, rng);
    if (unit2 > 0) c2->encode({y, chunk}, {server_images_.data() + r * unit2, unit2}, rng);
    for (size_t k = 0; k < chunk; ++k) y[k] -= c[k];  // s_r = y − C2(y)
  }
}

void OneBitAllreduce::decode_for(int /*worker*/, std::span<float> out) const {
  if (general()) {
    std::copy(decoded_.begin(), decoded_.begin() + static_cast<std::ptrdiff_t>(d_), out.begin());
    return;
  }
  // Every worker holds the same gathered image (server_bits_, c_) after
  // phase 2 and decodes it the same way.
  cpu::onebit_decode(server_bits_.data(), c_.data(), n_, D_, d_, out.data());
}

void OneBitAllreduce::serialize(StateArchive& io, const std::string& prefix) {
  settle();  // the errors themselves (a load then overwrites them)
  io.field(prefix + ".worker_errors", e_);
  io.field(prefix + ".server_errors", s_);
  io.field(prefix + ".worker_scales", a_);
  io.field(prefix + ".server_scales", c_);
  io.field(prefix + ".server_bits", server_bits_);
  // Only a reused padding is state (fresh zeros are not), so checkpoints of
  // zero-padded runs keep their entries.
  if (pad_reuse_) io.field(prefix + ".padding", pad_);
}

// ---------------------------------------------------------------------------
// OneBitAllreduceSet

OneBitAllreduceSet::OneBitAllreduceSet(int workers, const std::vector<OneBitSlice>& slices,
                                       size_t pad_multiple, WorkerRange local)
    : slices_(slices) {
  if (slices_.empty()) throw std::invalid_argument("OneBitAllreduceSet: no slice");
  parts_.reserve(slices_.size());
  for (const OneBitSlice& s : slices_) {
    if (s.offset != dim_) {
      throw std::invalid_argument("OneBitAllreduceSet: slices must tile the buffer in order");
    }
    dim_ += s.size;
    parts_.emplace_back(workers, s.size, pad_multiple, local);
  }
}

size_t OneBitAllreduceSet::padded_dim() const {
  size_t D = 0;
  for (const auto& p : parts_) D += p.padded_dim();
  return D;
}

void OneBitAllreduceSet::set_error_feedback(bool on) {
  for (auto& p : parts_) p.set_error_feedback(on);
}

void OneBitAllreduceSet::set_stages(const OneBitStage& worker, const OneBitStage& server) {
  for (auto& p : parts_) p.set_stages(worker, server);
}

void OneBitAllreduceSet::set_pad_reuse(bool on) {
  for (auto& p : parts_) p.set_pad_reuse(on);
}

void OneBitAllreduceSet::reset_errors() {
  for (auto& p : parts_) p.reset_errors();
}

void OneBitAllreduceSet::serialize(StateArchive& io) {
  if (parts_.size() == 1) {
    parts_[0].serialize(io);
    return;
  }
  for (size_t p = 0; p < parts_.size(); ++p) parts_[p].serialize(io, "onebit." + std::to_string(p));
}

void OneBitAllreduceSet::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out) {
  run(comm, in, out, 0, 0);
}

void OneBitAllreduceSet::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out,
                             uint64_t seed, int64_t step) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    const OneBitSlice& s = slices_[p];
    WorkerBuffers slice = in;
    slice.data = in.data + s.offset;
    slice.len = s.size;
    const uint64_t slice_seed = p == 0 ? seed : splitmix64(seed ^ p);
    parts_[p].run(comm, slice, out.subspan(s.offset, s.size), slice_seed, step);
  }
}

void OneBitAllreduceSet::run_momentum(Communicator& comm, const OneBitMomentumInput& momentum,
                                      std::span<float> out) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    const OneBitSlice& s = slices_[p];
    OneBitMomentumInput slice = momentum;
    slice.m = momentum.m + s.offset;
    slice.g.data = momentum.g.data + s.offset;
    slice.g.len = s.size;
    parts_[p].run_momentum(comm, slice, out.subspan(s.offset, s.size));
  }
}

void OneBitAllreduceSet::begin(bool momentum, uint64_t seed, int64_t step) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    parts_[p].begin(momentum, p == 0 ? seed : splitmix64(seed ^ p), step);
  }
}

void OneBitAllreduceSet::add_worker(int i, std::span<const float> b) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    parts_[p].add_worker(i, b.subspan(slices_[p].offset, slices_[p].size));
  }
}

void OneBitAllreduceSet::add_worker_momentum(int i, const float* m, const float* g,
                                             const AdamCoeffs& c) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    const size_t at = slices_[p].offset;
    parts_[p].add_worker_momentum(i, m + at, g + at, c);
  }
}

void OneBitAllreduceSet::finish(Communicator& comm, std::span<float> out) {
  for (size_t p = 0; p < parts_.size(); ++p) {
    parts_[p].finish(comm, out.subspan(slices_[p].offset, slices_[p].size));
  }
}

std::vector<CommRecord> OneBitAllreduceSet::plan(int workers, const std::vector<int64_t>& sizes,
                                                 size_t pad_multiple, const OneBitStage& worker,
                                                 const OneBitStage& server) {
  std::vector<CommRecord> out;
  for (const int64_t size : sizes) {
    const auto part =
        OneBitAllreduce::plan(workers, static_cast<size_t>(size), pad_multiple, worker, server);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

int64_t OneBitAllreduceSet::sent_bytes_per_call() const {
  int64_t sum = 0;
  for (const auto& p : parts_) sum += p.sent_bytes_per_call();
  return sum;
}

size_t OneBitAllreduceSet::resident_bytes() const {
  size_t sum = 0;
  for (const auto& p : parts_) sum += p.resident_bytes();
  return sum;
}

}  // namespace bitlab
