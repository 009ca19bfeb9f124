#include "sim/onebit_allreduce.hpp"

#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

#include "sim/compressor.hpp"

namespace bitlab {

size_t onebit_reference_pad_multiple(int n) {
  return static_cast<size_t>(n) * std::lcm(static_cast<size_t>(n), size_t{8});
}

size_t onebit_padded_dim(size_t dim, int n, size_t pad_multiple) {
  const size_t m = pad_multiple ? pad_multiple : onebit_reference_pad_multiple(n);
  return (dim + m - 1) / m * m;
}

OneBitAllreduce::OneBitAllreduce(int workers, size_t dim, size_t pad_multiple)
    : n_(workers), d_(dim) {
  if (workers < 1) throw std::invalid_argument("OneBitAllreduce: workers must be >= 1");
  if (pad_multiple % (8 * static_cast<size_t>(workers)) != 0) {
    throw std::invalid_argument("OneBitAllreduce: pad_multiple " + std::to_string(pad_multiple) +
                                " must be a multiple of 8n = " + std::to_string(8 * workers));
  }
  D_ = onebit_padded_dim(std::max<size_t>(dim, 1), workers, pad_multiple);
  e_.assign(D_ * n_, 0.0f);
  s_.assign(D_, 0.0f);
  bits_.assign(D_ / 8 * n_, 0);
  server_bits_.assign(D_ / 8, 0);
  a_.assign(n_, 0.0f);
  c_.assign(n_, 0.0f);
  acc_.assign(D_, 0.0f);
  expand_.assign(static_cast<size_t>(n_) * 2048, 0.0f);
}

void OneBitAllreduce::reset_errors() {
  std::fill(e_.begin(), e_.end(), 0.0f);
  std::fill(s_.begin(), s_.end(), 0.0f);
}

int64_t OneBitAllreduce::sent_bytes_per_call() const {
  const int64_t n = n_, D = static_cast<int64_t>(D_);
  return 2 * (n - 1) * D / (8 * n) + 2 * 4 * (n - 1);
}

namespace {

// Sum of squares over fixed blocks of 4096 in double, serial: the same
// whatever thread runs it.
double block_sum_squares(const float* p, size_t n) {
  double total = 0.0;
  for (size_t lo = 0; lo < n; lo += 4096) {
    const size_t hi = std::min(n, lo + 4096);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t k = lo; k < hi; ++k) s += static_cast<double>(p[k]) * p[k];
    total += s;
  }
  return total;
}

// One pass: bits of sign(u) (MSB first, sign(0) = +1) and u -= a·sign(u), for
// len a multiple of 8.
void pack_and_subtract(float* u, size_t len, float a, uint8_t* bits) {
  for (size_t j = 0; j < len / 8; ++j) {
    float* p = u + 8 * j;
    unsigned byte = 0;
    for (int t = 0; t < 8; ++t) {
      const bool pos = p[t] >= 0.0f;
      byte |= static_cast<unsigned>(pos) << (7 - t);
      p[t] -= pos ? a : -a;
    }
    bits[j] = static_cast<uint8_t>(byte);
  }
}

// table[8·b + t] = bit (7 − t) of byte b set ? +a : −a.
void fill_expand_table(float a, float* table) {
  for (int b = 0; b < 256; ++b) {
    for (int t = 0; t < 8; ++t) table[8 * b + t] = (b >> (7 - t)) & 1 ? a : -a;
  }
}

}  // namespace

void OneBitAllreduce::run(Communicator& comm, const WorkerBuffers& in, std::span<float> out) {
  const int n = n_;
  const size_t D = D_, d = d_, chunk = D_ / n_, chunk_bytes = chunk / 8;
  if (!error_feedback_) reset_errors();
  // Workers and servers this rank owns (all of them in the simulator).
  const WorkerRange mine = comm.local_workers();

  // ---- worker side: u = pad(b_i) + e_i ; a_i = ‖u‖/√D ; e_i = u − a_i sign(u)
#pragma omp parallel for schedule(static)
  for (int i = mine.begin; i < mine.end; ++i) {
    float* e = e_.data() + static_cast<size_t>(i) * D;
    const float* b = in[i].data();
    // One pass: e becomes u = b + e (padding: b = 0) and ‖u‖² is summed over
    // the same fixed blocks of 4096 as block_sum_squares, while each block is
    // still in cache.
    double ss = 0.0;
    for (size_t lo = 0; lo < D; lo += 4096) {
      const size_t hi = std::min(D, lo + 4096);
      const size_t hb = std::min(hi, std::max(lo, d));
#pragma omp simd
      for (size_t k = lo; k < hb; ++k) e[k] += b[k];
      double part = 0.0;
#pragma omp simd reduction(+ : part)
      for (size_t k = lo; k < hi; ++k) part += static_cast<double>(e[k]) * e[k];
      ss += part;
    }
    const float a = static_cast<float>(std::sqrt(ss / static_cast<double>(D)));
    a_[i] = a;
    uint8_t* bits = bits_.data() + static_cast<size_t>(i) * (D / 8);
    pack_and_subtract(e, D, a, bits);
  }

  // ---- phase 1: alltoall of sign chunks (S = D/8 bytes a worker sends in
  // all, its own chunk included) and allgather of the n fp32 scales.
  // Across ranks: server r's chunk of every worker's signs goes to r's owner.
  comm.scatter_columns(bits_.data(), D / 8, comm.server_bounds(static_cast<int64_t>(chunk_bytes)));
  comm.gather_columns(a_.data(), comm.server_bounds(sizeof(float)));
  CommRecord r;
  r.ranks = n;
  r.op = "alltoall";
  r.algorithm = "pairwise";
  r.dtype = "bits";
  r.payload_bytes = static_cast<int64_t>(D / 8);
  WireCost c = pairwise_alltoall_cost(n, r.payload_bytes);
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  comm.record(r);
  r.op = "allgather";
  r.algorithm = "ring";
  r.dtype = "fp32";
  r.payload_bytes = 4 * n;
  c = ring_allgather_cost(n, r.payload_bytes);
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  comm.record(r);

  // ---- server side, server r owns elements [r·D/n, (r+1)·D/n).
  // Each worker's sign byte expands through a 256-entry table to its 8 values
  // ±a_i (branch-free, 8 floats at a time); the sums still run over workers
  // in order 0..n−1 from 0, as a plain per-element loop would.
  for (int i = 0; i < n; ++i)
    fill_expand_table(a_[i], expand_.data() + static_cast<size_t>(i) * 2048);
#pragma omp parallel for schedule(static)
  for (int srv = mine.begin; srv < mine.end; ++srv) {
    float* s = s_.data() + static_cast<size_t>(srv) * chunk;
    float* acc = acc_.data() + static_cast<size_t>(srv) * chunk;
    std::fill(acc, acc + chunk, 0.0f);
    for (int i = 0; i < n; ++i) {  // fixed worker order
      const uint8_t* bytes = bits_.data() + static_cast<size_t>(i) * (D / 8) + srv * chunk_bytes;
      const float* table = expand_.data() + static_cast<size_t>(i) * 2048;
      for (size_t j = 0; j < chunk_bytes; ++j) {
        const float* v = table + 8 * static_cast<size_t>(bytes[j]);
        float* y = acc + 8 * j;
#pragma omp simd
        for (int t = 0; t < 8; ++t) y[t] += v[t];
      }
    }
    const float nf = static_cast<float>(n);
#pragma omp simd
    for (size_t k = 0; k < chunk; ++k) s[k] += acc[k] / nf;  // y = mean + s_r, kept in s
    const float cr =
        static_cast<float>(std::sqrt(block_sum_squares(s, chunk) / static_cast<double>(chunk)));
    c_[srv] = cr;
    pack_and_subtract(s, chunk, cr, server_bits_.data() + srv * chunk_bytes);
  }

  // ---- phase 2: allgather of the server sign chunks (S = D/8 gathered) and
  // of the server scales.
  comm.gather_columns(server_bits_.data(), comm.server_bounds(static_cast<int64_t>(chunk_bytes)));
  comm.gather_columns(c_.data(), comm.server_bounds(sizeof(float)));
  r.op = "allgather";
  r.algorithm = "ring";
  r.dtype = "bits";
  r.payload_bytes = static_cast<int64_t>(D / 8);
  c = ring_allgather_cost(n, r.payload_bytes);
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  comm.record(r);
  r.dtype = "fp32";
  r.payload_bytes = 4 * n;
  c = ring_allgather_cost(n, r.payload_bytes);
  r.sent_bytes = c.sent_bytes;
  r.messages = c.messages;
  comm.record(r);

  decode_for(0, out);
}

void OneBitAllreduce::decode_for(int /*worker*/, std::span<float> out) const {
  // Every worker holds the same gathered image (server_bits_, c_) after
  // phase 2 and decodes it the same way: whole bytes through a per-server
  // table, the last partial byte element by element.
  const size_t chunk_bytes = D_ / n_ / 8;
  const int64_t full_bytes = static_cast<int64_t>(d_ / 8);
  thread_local std::vector<float> tables;
  tables.resize(static_cast<size_t>(n_) * 2048);
  for (int r = 0; r < n_; ++r)
    fill_expand_table(c_[r], tables.data() + static_cast<size_t>(r) * 2048);
  const float* tab = tables.data();
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < full_bytes; ++j) {
    const float* v =
        tab + (static_cast<size_t>(j) / chunk_bytes) * 2048 + 8 * size_t{server_bits_[j]};
    std::copy(v, v + 8, out.data() + 8 * j);
  }
  for (size_t k = static_cast<size_t>(full_bytes) * 8; k < d_; ++k) {
    const float cr = c_[k / (D_ / n_)];
    out[k] = (server_bits_[k / 8] >> (7 - k % 8)) & 1u ? cr : -cr;
  }
}

}  // namespace bitlab
