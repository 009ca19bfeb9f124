// Compressors (docs/algorithms.md §1 "Other compressors", §6, §7): each maps a
// float vector x to a wire image of an exact size in bytes and back. The
// simulator mostly needs the value the receiver reconstructs, C(x) =
// decode(encode(x)), which `apply` computes directly; `encode`/`decode` build
// and read the real byte image (what an MPI run sends), and the tests check
// that both paths agree bit for bit. A compressor never knows who calls it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/core/registry.hpp"
#include "sim/core/rng.hpp"

namespace bitlab {

class Compressor {
 public:
  virtual ~Compressor() = default;
  virtual std::string name() const = 0;
  // Exact bytes of the wire image of n elements (payload: codes, scales,
  // indices; no framing).
  virtual int64_t wire_bytes(size_t n) const = 0;
  // out = C(x) = decode(encode(x)). `rng` feeds stochastic compressors
  // (stochastic rounding, random-k, binarization); deterministic ones ignore
  // it. out and x may alias.
  virtual void apply(std::span<const float> x, std::span<float> out,
                     const RngStream& rng) const = 0;
  // The wire image (wire.size() == wire_bytes(x.size())).
  virtual void encode(std::span<const float> x, std::span<uint8_t> wire,
                      const RngStream& rng) const = 0;
  virtual void decode(std::span<const uint8_t> wire, std::span<float> out) const = 0;
  // A receiver's decode of an image its sender encoded from `rng`: only a
  // compressor whose image leaves out what the stream gives (random-k with
  // shared_seed: the indices) reads it; every other one ignores it.
  virtual void decode_shared(std::span<const uint8_t> wire, std::span<float> out,
                             const RngStream& /*rng*/) const {
    decode(wire, out);
  }
  // True when C(x) of every worker can be summed by an ordinary allreduce
  // (fp16/bf16 casts, identity): the wire image is a plain array.
  virtual bool allreduce_compatible() const { return false; }
  // Type on the wire for the comm log ("fp32", "bits", "int4", ...).
  virtual std::string wire_dtype() const = 0;
  // True when every worker must draw the same random numbers (random-k with a
  // shared seed: the receivers regenerate the indices, so none are sent).
  // Collectives then pass every worker the same stream.
  virtual bool shared_randomness() const { return false; }
};

const std::vector<RegistryEntry<Compressor>>& compressor_registry();
// Builds a compressor from a (raw or resolved) options object {"name": ...};
// errors name `path`.
std::unique_ptr<Compressor> make_compressor(const Json& options, const std::string& path);

// ---- bit packing (MSB first within each byte, as the reference) -----------

// bits[k / 8] bit (7 - k % 8) = (x[k] >= 0). sign(0) = +1 everywhere.
// Writes ceil(n / 8) bytes; the unused low bits of the last byte are 0.
void pack_signs(std::span<const float> x, std::span<uint8_t> bits);
// out[k] = bit k set ? +scale : -scale.
void unpack_signs(std::span<const uint8_t> bits, float scale, std::span<float> out);

// ---- the scaled sign compressor (also used inside the compressed allreduce)

enum class SignScale { kRms, kL1 };

// C(x) = a · sign(x) with a = ‖x‖₂/√n (RMS, the reference's choice: it keeps
// ‖C(x)‖₂ = ‖x‖₂) or a = ‖x‖₁/n (L1, EF-signSGD's). Wire: ceil(n/8) bytes of
// signs + one fp32 scale.
class SignCompressor final : public Compressor {
 public:
  explicit SignCompressor(SignScale scale = SignScale::kRms) : scale_(scale) {}
  std::string name() const override { return "sign"; }
  int64_t wire_bytes(size_t n) const override { return static_cast<int64_t>((n + 7) / 8) + 4; }
  void apply(std::span<const float> x, std::span<float> out, const RngStream&) const override;
  void encode(std::span<const float> x, std::span<uint8_t> wire, const RngStream&) const override;
  void decode(std::span<const uint8_t> wire, std::span<float> out) const override;
  std::string wire_dtype() const override { return "bits"; }
  float scale_of(std::span<const float> x) const;

 private:
  SignScale scale_;
};

}  // namespace bitlab
