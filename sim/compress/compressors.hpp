// The compressors other than sign (docs/algorithms.md §1 "Other compressors", §6,
// §7), with their options. Each is registered by name in
// compressor_registry.cpp; `make_compressor({"name": ...})` builds one.
//
// Wire images are in host byte order (little-endian on every supported
// machine); floats are IEEE fp32 bits, indices uint32 (so n < 2^32).
//
//   name      wire bytes for n elements           allreduce-compatible
//   identity  4n                                   yes
//   fp16      2n (IEEE binary16, RNE)              yes
//   bf16      2n (bfloat16, RNE)                   yes
//   sign      ceil(n/8) + 4                        no   (sim/compress/compressor.hpp)
//   nbit      ceil(n·b/8) + groups·(4 | 2)         no   (sim/compress/quantize.hpp)
//   topk      8k  (k fp32 values, k uint32 indices)
//   randomk   4k with shared_seed, else 8k
//   binarize  ceil(n/8)
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "sim/compress/compressor.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

// For compressors without options.
struct NoCompressorOptions {
  static Schema<NoCompressorOptions> schema() { return {}; }
};

// ---- full-precision and cast compressors ------------------------------------

class IdentityCompressor final : public Compressor {
 public:
  explicit IdentityCompressor(const NoCompressorOptions& = {}) {}
  std::string name() const override { return "identity"; }
  int64_t wire_bytes(size_t n) const override { return 4 * static_cast<int64_t>(n); }
  void apply(std::span<const float> x, std::span<float> out, const RngStream&) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire, const RngStream&) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  bool allreduce_compatible() const override { return true; }
  std::string wire_dtype() const override { return "fp32"; }
};

// Rounds to fp16 or bf16 (round-to-nearest-even, sim/core/float16.hpp); the wire
// is the 16-bit pattern of each element.
class CastCompressor final : public Compressor {
 public:
  enum class Type { kFp16, kBf16 };
  explicit CastCompressor(Type type) : type_(type) {}
  std::string name() const override { return type_ == Type::kFp16 ? "fp16" : "bf16"; }
  int64_t wire_bytes(size_t n) const override { return 2 * static_cast<int64_t>(n); }
  void apply(std::span<const float> x, std::span<float> out, const RngStream&) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire, const RngStream&) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  bool allreduce_compatible() const override { return true; }
  std::string wire_dtype() const override { return name(); }

 private:
  Type type_;
};

struct Fp16CastOptions {
  static Schema<Fp16CastOptions> schema() { return {}; }
  operator CastCompressor::Type() const { return CastCompressor::Type::kFp16; }
};
struct Bf16CastOptions {
  static Schema<Bf16CastOptions> schema() { return {}; }
  operator CastCompressor::Type() const { return CastCompressor::Type::kBf16; }
};

// ---- sign (the class is in compressor.hpp) -------------------------------

struct SignOptions {
  std::string scale = "rms";  // rms | l1
  static Schema<SignOptions> schema();
  // Lets the registry build SignCompressor (whose constructor takes the
  // scale) straight from the options, so the object really is a
  // SignCompressor.
  operator SignScale() const { return scale == "l1" ? SignScale::kL1 : SignScale::kRms; }
};

// ---- n-bit quantization -----------------------------------------------------

struct NbitOptions {
  int64_t bits = 4;
  int64_t group_size = 128;
  std::string rounding = "nearest";  // nearest | stochastic
  std::string scale_dtype = "fp32";  // fp32 | fp16
  static Schema<NbitOptions> schema();
  QuantizeSpec spec() const;
};

// n-bit symmetric per-group quantization (docs/algorithms.md §1; sim/compress/quantize.hpp).
// Note bits = 1 follows the same formula: q ∈ {−1, 0}, i.e. levels {−M, 0}.
// Stochastic rounding of element k uses rng.block(k) lane 0.
class NbitCompressor final : public Compressor {
 public:
  explicit NbitCompressor(const NbitOptions& opts) : spec_(opts.spec()) {}
  explicit NbitCompressor(const QuantizeSpec& spec) : spec_(spec) {}
  std::string name() const override { return "nbit"; }
  int64_t wire_bytes(size_t n) const override { return quantize_wire_bytes(n, spec_); }
  void apply(std::span<const float> x, std::span<float> out, const RngStream& rng) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire,
              const RngStream& rng) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  std::string wire_dtype() const override { return "int" + std::to_string(spec_.bits); }
  const QuantizeSpec& spec() const { return spec_; }

 private:
  QuantizeSpec spec_;
};

// ---- sparsifiers ------------------------------------------------------------

// k for n elements: k_option > 0 ? min(k_option, n) : min(n, max(1, round(ratio·n)));
// 0 when n = 0.
size_t sparse_count(size_t n, double ratio, int64_t k_option);

struct TopkOptions {
  double ratio = 0.01;  // in (0, 1]
  int64_t k = 0;        // > 0 overrides ratio
  static Schema<TopkOptions> schema();
};

// Keeps the k largest |x| (ties: the lower index wins; NaN counts as larger
// than inf), zeroes the rest. Wire: the k kept values (fp32, ascending index
// order), then their k indices (uint32).
class TopkCompressor final : public Compressor {
 public:
  explicit TopkCompressor(const TopkOptions& opts) : opts_(opts) {}
  std::string name() const override { return "topk"; }
  size_t count(size_t n) const { return sparse_count(n, opts_.ratio, opts_.k); }
  int64_t wire_bytes(size_t n) const override { return 8 * static_cast<int64_t>(count(n)); }
  void apply(std::span<const float> x, std::span<float> out, const RngStream&) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire, const RngStream&) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  std::string wire_dtype() const override { return "fp32+idx32"; }

 private:
  TopkOptions opts_;
};

struct RandomkOptions {
  double ratio = 0.01;
  int64_t k = 0;
  bool shared_seed = true;
  bool rescale = false;
  static Schema<RandomkOptions> schema();
};

// Keeps k elements chosen uniformly without replacement (Floyd's algorithm on
// the stream's sequential draws: a pure function of the stream, n and k),
// optionally multiplied by n/k so that E[C(x)] = x.
//
// shared_seed: the receiver regenerates the indices from the same stream, so
// only the k values (ascending index order) go on the wire. Which stream is
// "shared" is the caller's choice: pass every worker the same stream (e.g.
// worker 0's) to model it. Because the receiver needs that stream, decode
// without one is impossible: use the 3-argument decode below (the 2-argument
// one throws std::logic_error when shared_seed is on). Without shared_seed the
// wire is the k values then their k uint32 indices.
class RandomkCompressor final : public Compressor {
 public:
  explicit RandomkCompressor(const RandomkOptions& opts) : opts_(opts) {}
  std::string name() const override { return "randomk"; }
  size_t count(size_t n) const { return sparse_count(n, opts_.ratio, opts_.k); }
  int64_t wire_bytes(size_t n) const override {
    return (opts_.shared_seed ? 4 : 8) * static_cast<int64_t>(count(n));
  }
  void apply(std::span<const float> x, std::span<float> out, const RngStream& rng) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire,
              const RngStream& rng) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  // The receiver's decode when indices come from the shared stream.
  void decode_shared(std::span<const uint8_t> wire, std::span<float> out,
                     const RngStream& rng) const override;
  std::string wire_dtype() const override { return opts_.shared_seed ? "fp32" : "fp32+idx32"; }
  // With shared_seed every worker draws the same indices (the receivers
  // draw them too: none are sent).
  bool shared_randomness() const override { return opts_.shared_seed; }
  // The k indices chosen from `rng` for n elements, ascending (thread-local
  // storage, valid until the next call on this thread).
  std::span<const uint32_t> indices(size_t n, const RngStream& rng) const;

 private:
  float value_scale(size_t n) const;
  RandomkOptions opts_;
};

// ---- unbiased randomized binarization (BinSGDM, docs/algorithms.md §7) -----------

// z = clamp(x, −1, 1) (the caller passes m ⊘ (b + ε), which lies in [−1, 1]
// up to rounding; clamping makes the probabilities valid for any input, NaN
// counts as −1). q = +1 with probability (1 + z)/2, else −1, so E[q] = z and
// Var[q] = 1 − z². The uniform of element k is u32_to_unit_open0 of lane
// k % 4 of rng.block(k / 4) (all four lanes used: 4× fewer Philox calls),
// u ∈ (0, 1]; q = +1 iff u ≤ (1 + z)/2, so z = ±1 give q = ±1 surely.
// Wire: ceil(n/8) bytes of pack_signs bits (bit set = +1), no scale.
class BinarizeCompressor final : public Compressor {
 public:
  explicit BinarizeCompressor(const NoCompressorOptions& = {}) {}
  std::string name() const override { return "binarize"; }
  int64_t wire_bytes(size_t n) const override { return static_cast<int64_t>((n + 7) / 8); }
  void apply(std::span<const float> x, std::span<float> out, const RngStream& rng) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire,
              const RngStream& rng) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  std::string wire_dtype() const override { return "bits"; }
};

}  // namespace bitlab
