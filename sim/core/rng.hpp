// Counter-based random numbers: every draw is a pure function of
// (seed, purpose, worker, step, index), so results never depend on the order
// in which threads run or on how many there are (docs/design.md, "Deterministic by
// construction").
//
// The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as
// easy as 1, 2, 3", SC'11). Key = hash(seed, purpose); counter = (index_lo,
// index_hi, worker, step).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <span>

#include "sim/core/hd.hpp"
#include "sim/core/isa.hpp"

namespace bitlab {

// Why a stream is drawn. Adding a purpose never changes the numbers of another.
enum class Purpose : uint32_t {
  kData = 1,       // synthetic data sets (problem generation)
  kInit = 2,       // initial parameters
  kShard = 3,      // assignment of samples to workers
  kShuffle = 4,    // per-epoch batch order of a worker
  kGradNoise = 5,  // additive gradient noise (quadratic problem)
  kCompress = 6,   // stochastic compressors (stochastic rounding, random-k, binarization)
  kJitter = 7,     // compute-time jitter of the network model
  kLowRank = 8,    // PowerSGD's random start of Q (sim/collectives/powersgd.hpp)
  kTest = 100,     // tests only
};

inline constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

using PhiloxBlock = std::array<uint32_t, 4>;

// BITLAB_HD: the CUDA kernels (sim/cuda/) draw with this very code.
BITLAB_HD inline PhiloxBlock philox4x32_10(PhiloxBlock ctr, std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{kM0} * ctr[0];
    const uint64_t p1 = uint64_t{kM1} * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
    key[0] += kW0;
    key[1] += kW1;
  }
  return ctr;
}

// Uniform in (0, 1]: never 0, so log() is safe. 24 random bits.
BITLAB_HD inline float u32_to_unit_open0(uint32_t u) {
  return static_cast<float>((u >> 8) + 1u) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) with 53 random bits from two words.
inline double u64_to_unit(uint32_t hi, uint32_t lo) {
  const uint64_t v = (uint64_t{hi} << 21) ^ (uint64_t{lo} >> 11);
  return static_cast<double>(v & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// One stream: fixed (seed, purpose, worker, step); draws addressed by index.
// Element-addressed draws (`block(i)`) are what parallel code should use; the
// sequential `next_*` helpers keep their own index and suit small serial work
// (data generation, shuffles).
class RngStream {
 public:
  RngStream(uint64_t seed, Purpose purpose, uint32_t worker = 0, uint64_t step = 0)
      : worker_(worker), step_(static_cast<uint32_t>(step)) {
    const uint64_t k = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(purpose) << 32 |
                                                    static_cast<uint32_t>(step >> 32)));
    key_ = {static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32)};
  }

  // Trivially copyable, so a kernel takes the stream by value and calls this.
  BITLAB_HD PhiloxBlock block(uint64_t i) const {
    return philox4x32_10({static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), worker_, step_},
                         key_);
  }

  // The counter's fixed words and the key, for the batched kernels
  // (sim/core/normal_kernels.inc), which run the rounds of many blocks at once.
  std::array<uint32_t, 2> key() const { return key_; }
  uint32_t worker_word() const { return worker_; }
  uint32_t step_word() const { return step_; }

  // Sequential interface.
  uint32_t next_u32() {
    if (lane_ == 4) {
      buf_ = block(next_block_++);
      lane_ = 0;
    }
    return buf_[lane_++];
  }
  uint64_t next_u64() {
    const uint64_t hi = next_u32();
    return hi << 32 | next_u32();
  }
  // Uniform in [0, 1), 53 bits.
  double next_uniform() {
    const uint32_t hi = next_u32();
    return u64_to_unit(hi, next_u32());
  }
  // Uniform integer in [0, n) (n > 0), by rejection: exactly uniform.
  uint64_t next_below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t v;
    do v = next_u64();
    while (v >= limit);
    return v % n;
  }
  // Standard normal (Box-Muller in double; one value per call, the pair's
  // second value is kept).
  double next_normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1;
    do u1 = next_uniform();
    while (u1 <= 0.0);
    const double u2 = next_uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }
  // Gamma(shape, 1) by Marsaglia-Tsang (with the shape < 1 boost).
  double next_gamma(double shape) {
    if (shape < 1.0) {
      const double u = next_uniform();
      return next_gamma(shape + 1.0) * std::pow(u > 0 ? u : 1e-300, 1.0 / shape);
    }
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    for (;;) {
      double x, v;
      do {
        x = next_normal();
        v = 1.0 + c * x;
      } while (v <= 0.0);
      v = v * v * v;
      const double u = next_uniform();
      if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
      if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
    }
  }

 private:
  std::array<uint32_t, 2> key_{};
  uint32_t worker_;
  uint32_t step_;
  PhiloxBlock buf_{};
  int lane_ = 4;
  uint64_t next_block_ = 0;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fills out[i] with scale * N(0,1), element-addressed: out[i] depends only on
// the stream and first_index + i (Box-Muller in float on the lanes of block
// (first_index + i)/4, sim/core/normal_math.hpp). Runs on the instruction set
// active_isa() picks; every one gives the same bits.
void fill_normal(const RngStream& rng, std::span<float> out, float scale, uint64_t first_index = 0);
// The same on a named instruction set (tests and benchmarks; it must be supported).
void fill_normal_isa(Isa isa, const RngStream& rng, std::span<float> out, float scale,
                     uint64_t first_index = 0);

}  // namespace bitlab
