// Error-feedback policies, one error buffer e_i per worker (docs/algorithms.md §1
// worker side, §6 LoCo). With a compressor C, each step and worker:
//
//   h   = x + e_i                               compensate()
//   ĥ   = C(h)                                  (the caller)
//   e_i = h − ĥ                    (classic)    update()
//   e_i = β·e_i + (1−β)·(h − ĥ)    (ema, LoCo)
//   then, with storage_bits = 8: e_i = Q8(e_i)  (LoCo stores the error 8-bit
//        quantized: nbit quantizer, 8 bits, group storage_group, nearest)
//   "none": h = x, no error is kept.
//
// Identities the tests check (exact storage, e_0 = 0, real arithmetic):
//   classic: Σ_{t<T} ĥ_t = Σ_{t<T} x_t − e_T
//   ema:     ĥ_t = x_t + (e_t − e_{t+1})/(1−β), so Σ_{t<T} ĥ_t = Σ_{t<T} x_t − e_T/(1−β)
//   4-bit nbit C (clamp error ≤ M/8): max|e_t| ≤ G/7 per group, G = max |x| so far.
//
// Resets: begin_step(step) with reset_every = T > 0 zeroes every error at
// steps T+1, 2T+1, ... (steps count from 1), i.e. after each T steps of use.
// LoCo's reference counts its reset per compressed tensor call, not per step
// (an artefact, docs/algorithms.md §6, departure D20); we count optimizer
// steps. An extension, flagged: the reset also applies to kind = "classic" (it
// is a no-op for "none"), so either policy can be restarted periodically.
//
// The error is kept in fp32; with storage_bits = 8 the fp32 buffer holds the
// dequantized 8-bit values (what LoCo would read back), not a packed image.
// No allocation after construction.
//
// Resident workers (the MPI backend): the errors of the workers `local` only (default
// all, the simulator); under the MPI backend a rank holds its own block's rows
// (worker i at row i − local.begin) and calls compensate / update / error for
// those workers only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "sim/core/state_archive.hpp"

namespace bitlab {

struct ErrorFeedbackOptions {
  std::string kind = "none";  // none | classic | ema
  double beta = 0.8;          // ema only: LoCo's err_beta
  int64_t reset_every = 0;    // steps; 0 = never; LoCo uses 1024
  int64_t storage_bits = 32;  // 32 exact, or 8: stored 8-bit quantized as LoCo does
  int64_t storage_group = 128;
  static Schema<ErrorFeedbackOptions> schema();
};

class ErrorFeedback {
 public:
  enum class Kind { kNone, kClassic, kEma };

  ErrorFeedback(const ErrorFeedbackOptions& opts, int workers, size_t len, WorkerRange local = {});

  Kind kind() const { return kind_; }
  int workers() const { return workers_; }
  size_t len() const { return len_; }
  WorkerRange local() const { return local_; }
  // Bytes of the error rows this process holds (its resident workers').
  size_t resident_bytes() const { return e_.size() * sizeof(float); }

  // h = x + e_worker (none: h = x). h may alias x.
  void compensate(int worker, std::span<const float> x, std::span<float> h) const;
  // e_worker from h and ĥ = C(h) (see the file comment).
  void update(int worker, std::span<const float> h, std::span<const float> ch);
  // Called once at the start of optimizer step `step` (1-based): applies the
  // periodic reset.
  void begin_step(int64_t step);
  // Zeroes every worker's error.
  void reset();
  // Saves or loads the residuals (a checkpoint).
  void serialize(StateArchive& io) { io.field("error_feedback.e", e_); }
  // The worker's error (len() floats); empty for kind "none". Worker must be
  // resident (as for compensate and update).
  std::span<const float> error(int worker) const;

 private:
  size_t offset(int worker) const { return static_cast<size_t>(worker - local_.begin) * len_; }
  ErrorFeedbackOptions opts_;
  Kind kind_;
  int workers_;
  size_t len_;
  WorkerRange local_;     // resident workers
  std::vector<float> e_;  // resident workers × len, empty for kind none
  QuantizeSpec storage_spec_;
  RngStream unused_rng_;  // nearest rounding draws nothing
};

}  // namespace bitlab
