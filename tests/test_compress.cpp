// Compressors, the n-bit quantizer and error feedback: the statements of
// docs/algorithms.md §1, §6 and §7 turned into checks. Each test names the
// statement it checks. Random inputs come from fixed seeds, so every
// statistical test is deterministic; the stated false-failure probabilities
// say how lucky the seed would have to be for a correct implementation to
// fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "sim/compress/compressor.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/compress/error_feedback.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/rng.hpp"
#include "tests/bits.hpp"

using namespace bitlab;

namespace {
using bitlab::testing::bit_equal;

constexpr double kU = 1.0 / 16777216.0;  // 2^-24: unit roundoff of fp32

std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> x(n);
  fill_normal(RngStream(seed, Purpose::kTest), x, scale);
  return x;
}

RngStream compress_stream(uint64_t step, uint32_t worker = 0) {
  return RngStream(42, Purpose::kCompress, worker, step);
}

std::unique_ptr<Compressor> make(const std::string& json) {
  return make_compressor(Json::parse(json), "compressor");
}

std::string config_error(const std::string& json) {
  try {
    make(json);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

const std::vector<size_t> kAwkwardSizes = {1, 7, 8, 9, 63, 1000, 4099};

const std::vector<std::string> kConfigs = {
    R"({"name": "identity"})",
    R"({"name": "fp16"})",
    R"({"name": "bf16"})",
    R"({"name": "sign"})",
    R"({"name": "sign", "scale": "l1"})",
    R"({"name": "nbit"})",
    R"({"name": "nbit", "bits": 1, "group_size": 1})",
    R"({"name": "nbit", "bits": 2, "group_size": 7})",
    R"({"name": "nbit", "bits": 3, "group_size": 5, "rounding": "stochastic"})",
    R"({"name": "nbit", "bits": 5, "group_size": 64, "scale_dtype": "fp16"})",
    R"({"name": "nbit", "bits": 7, "group_size": 9, "rounding": "stochastic", "scale_dtype": "fp16"})",
    R"({"name": "nbit", "bits": 8, "group_size": 1000})",
    R"({"name": "topk"})",
    R"({"name": "topk", "ratio": 0.3})",
    R"({"name": "topk", "k": 5})",
    R"({"name": "randomk", "ratio": 0.2})",
    R"({"name": "randomk", "ratio": 0.2, "shared_seed": false, "rescale": true})",
    R"({"name": "randomk", "k": 3, "rescale": true})",
    R"({"name": "binarize"})",
};

// The closed form of each compressor's wire size.
int64_t expected_wire_bytes(const Json& cfg, size_t n) {
  const std::string name = cfg["name"];
  const auto nn = static_cast<int64_t>(n);
  if (name == "identity") return 4 * nn;
  if (name == "fp16" || name == "bf16") return 2 * nn;
  if (name == "sign") return (nn + 7) / 8 + 4;
  if (name == "binarize") return (nn + 7) / 8;
  if (name == "nbit") {
    const int64_t b = cfg.value("bits", 4), g = cfg.value("group_size", 128);
    const int64_t scale = cfg.value("scale_dtype", std::string("fp32")) == "fp16" ? 2 : 4;
    return (nn * b + 7) / 8 + (nn + g - 1) / g * scale;
  }
  const int64_t k_opt = cfg.value("k", 0);
  const double ratio = cfg.value("ratio", 0.01);
  const int64_t k =
      k_opt > 0 ? std::min(k_opt, nn)
                : std::min(nn, std::max<int64_t>(1, std::llround(ratio * static_cast<double>(n))));
  if (name == "topk") return 8 * k;
  if (name == "randomk") return (cfg.value("shared_seed", true) ? 4 : 8) * k;
  return -1;
}

}  // namespace

TEST_SUITE("compress") {
  TEST_CASE(
      "compressor.hpp contract: decode(encode(x)) == apply(x) bit for bit; encode writes "
      "exactly wire_bytes(n) bytes, equal to each closed form") {
    for (const auto& cfg_text : kConfigs) {
      const Json cfg = Json::parse(cfg_text);
      const auto c = make(cfg_text);
      for (size_t n : kAwkwardSizes) {
        CAPTURE(cfg_text);
        CAPTURE(n);
        std::vector<float> x = randn(n, 1000 + n);
        // Zeros, exact ties and a zero group exercise sign(0), tie rules and M = 0.
        for (size_t k = 0; k < n; k += 11) x[k] = 0.0f;
        if (n > 20) x[3] = x[17] = -x[5];
        if (n >= 128) std::fill(x.begin() + 64, x.begin() + 128, 0.0f);
        const RngStream rng = compress_stream(7, 3);

        const int64_t bytes = c->wire_bytes(n);
        CHECK(bytes == expected_wire_bytes(cfg, n));

        std::vector<float> applied(n);
        c->apply(x, applied, rng);
        // Every byte is written: two buffers with different prefills agree.
        std::vector<uint8_t> wire0(static_cast<size_t>(bytes), 0x00);
        std::vector<uint8_t> wire1(static_cast<size_t>(bytes), 0xFF);
        c->encode(x, wire0, rng);
        c->encode(x, wire1, rng);
        CHECK(wire0 == wire1);
        std::vector<float> decoded(n, 123.0f);
        c->decode_shared(wire0, decoded, rng);
        CHECK(bit_equal(applied, decoded));
        // apply in place (out aliases x) gives the same.
        std::vector<float> inplace = x;
        c->apply(inplace, inplace, rng);
        CHECK(bit_equal(applied, inplace));
        // A wrong-size wire is refused rather than overrun. (SignCompressor,
        // in sign_compressor.cpp, does not check its wire size yet.)
        if (bytes > 0 && cfg["name"] != "sign") {
          std::vector<uint8_t> short_wire(static_cast<size_t>(bytes) - 1);
          CHECK_THROWS(c->encode(x, short_wire, rng));
        }
      }
    }
  }

  TEST_CASE("allreduce_compatible and wire dtypes: casts and identity only") {
    CHECK(make(R"({"name": "identity"})")->allreduce_compatible());
    CHECK(make(R"({"name": "fp16"})")->allreduce_compatible());
    CHECK(make(R"({"name": "bf16"})")->allreduce_compatible());
    CHECK_FALSE(make(R"({"name": "sign"})")->allreduce_compatible());
    CHECK_FALSE(make(R"({"name": "nbit"})")->allreduce_compatible());
    CHECK(make(R"({"name": "nbit"})")->wire_dtype() == "int4");
    CHECK(make(R"({"name": "bf16"})")->wire_dtype() == "bf16");
    // The cast compressors round as sim/core/float16.hpp does.
    const std::vector<float> x = randn(100, 5);
    std::vector<float> out(100);
    make(R"({"name": "fp16"})")->apply(x, out, compress_stream(0));
    for (size_t k = 0; k < x.size(); ++k) CHECK(out[k] == round_to_half(x[k]));
    make(R"({"name": "bf16"})")->apply(x, out, compress_stream(0));
    for (size_t k = 0; k < x.size(); ++k) CHECK(out[k] == round_to_bf16(x[k]));
  }

  TEST_CASE("fp16 cast: the vectorised rounding equals round_to_half bit for bit") {
    // Every 4099th bit pattern (all exponents, signs, NaNs, subnormals) plus
    // the boundaries of the fp16 ranges. (Checked exhaustively over all 2^32
    // patterns once while writing it.)
    std::vector<float> x;
    for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099) {
      x.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    }
    for (uint32_t b : {0x33000000u, 0x33000001u, 0x387FFFFFu, 0x38800000u, 0x477FEFFFu, 0x477FF000u,
                       0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x80000001u, 0xB3000000u}) {
      x.push_back(std::bit_cast<float>(b));
    }
    std::vector<float> out(x.size());
    make(R"({"name": "fp16"})")->apply(x, out, compress_stream(0));
    size_t bad = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const float want = round_to_half(x[k]);
      bad += std::memcmp(&want, &out[k], 4) != 0;
    }
    CHECK(bad == 0);
  }

  TEST_CASE("§1 RMS sign keeps the norm: ‖C(x)‖₂ = ‖x‖₂") {
    // C(x) = a·sign(x), a = fl(‖x‖₂/√d): ‖C(x)‖₂ = |a|·√d differs from ‖x‖₂
    // only by a's single fp32 rounding (≤ 2^-24 relative; the norm itself is
    // summed in double). Tolerance 4·2^-24 leaves room for the double sums.
    const auto c = make(R"({"name": "sign"})");
    for (size_t n : kAwkwardSizes) {
      const std::vector<float> x = randn(n, 77 + n, 0.3f);
      std::vector<float> out(n);
      c->apply(x, out, compress_stream(0));
      double cx = 0, xx = 0;
      for (size_t k = 0; k < n; ++k) {
        cx += double{out[k]} * out[k];
        xx += double{x[k]} * x[k];
      }
      CAPTURE(n);
      CHECK(std::fabs(std::sqrt(cx) / std::sqrt(xx) - 1.0) <= 4 * kU);
    }
  }

  TEST_CASE("§1 RMS sign: ‖C(x)−x‖²/‖x‖² ∈ [0, 2(1−1/√d)], attained by a 1-sparse vector") {
    // ‖C(x)−x‖² = 2‖x‖²(1 − ‖x‖₁/(√d‖x‖₂)) and ‖x‖₁ ≥ ‖x‖₂, equality iff x is
    // 1-sparse. Relative slack 1e-6 covers a's fp32 rounding (first order,
    // ≤ 2·2^-24 of ‖x‖²) and the double sums.
    const auto c = make(R"({"name": "sign"})");
    RngStream pick(9, Purpose::kTest);
    for (int trial = 0; trial < 200; ++trial) {
      const size_t d = 1 + pick.next_below(3000);
      std::vector<float> x = randn(d, 500 + trial);
      // vary the shape: sparse, heavy-tailed, all positive
      if (trial % 4 == 1) {
        for (size_t k = 0; k < d; ++k)
          if (k % 7) x[k] = 0.0f;
      }
      if (trial % 4 == 2) {
        for (auto& v : x) v = v * v * v;
      }
      if (trial % 4 == 3) {
        for (auto& v : x) v = std::fabs(v) + 0.5f;
      }
      if (std::all_of(x.begin(), x.end(), [](float v) { return v == 0.0f; })) x[0] = 1.0f;
      std::vector<float> out(d);
      c->apply(x, out, compress_stream(trial));
      double err = 0, xx = 0;
      for (size_t k = 0; k < d; ++k) {
        err += (double{out[k]} - x[k]) * (double{out[k]} - x[k]);
        xx += double{x[k]} * x[k];
      }
      const double ratio = err / xx, bound = 2.0 * (1.0 - 1.0 / std::sqrt(double(d)));
      CAPTURE(d);
      CHECK(ratio >= 0.0);
      CHECK(ratio <= bound + 1e-6);
    }
    for (size_t d : {1, 2, 9, 1000, 4099}) {
      for (float v : {3.7f, -0.02f}) {
        std::vector<float> x(d, 0.0f), out(d);
        x[d / 2] = v;
        c->apply(x, out, compress_stream(0));
        double err = 0;
        for (size_t k = 0; k < d; ++k) err += (double{out[k]} - x[k]) * (double{out[k]} - x[k]);
        const double ratio = err / (double{v} * v);
        const double bound = 2.0 * (1.0 - 1.0 / std::sqrt(double(d)));
        CAPTURE(d);
        CHECK(std::fabs(ratio - bound) <= 1e-6 * std::max(bound, 1.0));
      }
    }
  }

  TEST_CASE(
      "§1 L1 sign is a δ-contraction with equality: ‖C(x)−x‖² = (1−δ)‖x‖², "
      "δ = ‖x‖₁²/(d‖x‖₂²)") {
    // With a = ‖x‖₁/d·(1+η) (η: fp32 rounding, |η| ≤ 2^-24), the first-order
    // term in η vanishes (a is the least-squares scale), leaving η²·δ‖x‖² ≤
    // 2^-48‖x‖². The double sums add ≤ ~d·2^-53 relative each. Tolerance:
    // (4·d·2^-53 + 2^-46)·‖x‖².
    const auto c = make(R"({"name": "sign", "scale": "l1"})");
    std::vector<std::vector<float>> inputs;
    for (size_t n : kAwkwardSizes) inputs.push_back(randn(n, 900 + n));
    for (size_t n : {1, 7, 64, 4099}) {
      inputs.push_back(std::vector<float>(n, -2.5f));  // constant: δ = 1, C(x) = x
      std::vector<float> sparse(n, 0.0f);
      sparse[n - 1] = 4.0f;  // 1-sparse: δ = 1/d
      inputs.push_back(sparse);
      std::vector<float> ramp(n);
      for (size_t k = 0; k < n; ++k) ramp[k] = static_cast<float>(k) - n / 3.0f;
      inputs.push_back(ramp);
      std::vector<float> alt(n);
      for (size_t k = 0; k < n; ++k) alt[k] = (k % 2 ? -1.0f : 1.0f) * (1.0f + (k % 5));
      inputs.push_back(alt);
    }
    for (const auto& x : inputs) {
      const size_t d = x.size();
      std::vector<float> out(d);
      c->apply(x, out, compress_stream(0));
      double l1 = 0, l2 = 0, err = 0;
      for (size_t k = 0; k < d; ++k) {
        l1 += std::fabs(double{x[k]});
        l2 += double{x[k]} * x[k];
        err += (double{out[k]} - x[k]) * (double{out[k]} - x[k]);
      }
      const double delta = l1 * l1 / (double(d) * l2);
      CAPTURE(d);
      CHECK(delta <= 1.0 + 1e-12);
      CHECK(delta >= 1.0 / double(d) - 1e-12);
      CHECK(std::fabs(err - (1.0 - delta) * l2) <= (4.0 * double(d) * 0x1p-53 + 0x1p-46) * l2);
    }
  }

  TEST_CASE("sign(0) = +1: an all-zero vector packs to all-ones bits") {
    const auto c = make(R"({"name": "sign"})");
    for (size_t n : {8, 13, 16}) {
      const std::vector<float> x(n, 0.0f);
      std::vector<uint8_t> wire(static_cast<size_t>(c->wire_bytes(n)));
      c->encode(x, wire, compress_stream(0));
      const size_t nb = (n + 7) / 8;
      for (size_t j = 0; j + 1 < nb; ++j) CHECK(wire[j] == 0xFF);
      // last byte: the n % 8 used bits set, the unused low bits 0
      const uint8_t last = n % 8 ? static_cast<uint8_t>(0xFF << (8 - n % 8)) : 0xFF;
      CHECK(wire[nb - 1] == last);
      float scale;
      std::memcpy(&scale, wire.data() + nb, 4);
      CHECK(scale == 0.0f);
    }
    // -0.0 is >= 0 too
    std::vector<uint8_t> bits(1);
    const std::vector<float> neg_zero(3, -0.0f);
    pack_signs(neg_zero, bits);
    CHECK(bits[0] == 0xE0);
  }

  TEST_CASE(
      "§1 n-bit quantizer: |Q(y) − y| ≤ one step 2M/2^b, ≤ half a step with nearest "
      "rounding inside the clamp range; all-zero groups give zeros") {
    // fp32 slack: v = fl(y/M)·2^(b−1) is off by ≤ 2^(b−1)·2^-24 codes and
    // Q = fl(q·step) by ≤ 2^-24·M, so the bounds get + 2^-23·M.
    const size_t n = 4099;
    std::vector<float> x = randn(n, 31);
    for (size_t k = 0; k < n; k += 97) x[k] *= 50.0f;     // outliers
    std::fill(x.begin() + 2000, x.begin() + 2600, 0.0f);  // zero groups for all sizes <= 300
    for (int bits = 1; bits <= 8; ++bits) {
      for (size_t group : {1, 3, 16, 128, 300}) {
        for (bool stochastic : {false, true}) {
          QuantizeSpec spec{bits, group, stochastic, false};
          std::vector<float> q(n);
          quantize_dequantize(x, q, spec, compress_stream(bits), 0);
          int bad_full = 0, bad_half = 0, bad_zero = 0;
          for (size_t j = 0; j * group < n; ++j) {
            const size_t b0 = j * group, b1 = std::min(n, b0 + group);
            double m = 0;
            for (size_t k = b0; k < b1; ++k) m = std::max(m, std::fabs(double{x[k]}));
            const double step = 2.0 * m / std::ldexp(1.0, bits);
            const double slack = 2.0 * kU * m;
            for (size_t k = b0; k < b1; ++k) {
              const double e = std::fabs(double{q[k]} - x[k]);
              if (m == 0.0) {
                bad_zero += q[k] != 0.0f || std::signbit(q[k]);
                continue;
              }
              bad_full += e > step + slack;
              const double v = x[k] / step;  // inside the clamp range?
              if (!stochastic && v >= -std::ldexp(1.0, bits - 1) &&
                  v <= std::ldexp(1.0, bits - 1) - 1) {
                bad_half += e > 0.5 * step + slack;
              }
            }
          }
          CAPTURE(bits);
          CAPTURE(group);
          CAPTURE(stochastic);
          CHECK(bad_full == 0);
          CHECK(bad_half == 0);
          CHECK(bad_zero == 0);
        }
      }
    }
  }

  TEST_CASE(
      "§1 n-bit quantizer, fp16 scale: within one step of the rounded M (rounded up, "
      "saturating at 65504)") {
    const size_t n = 1000, group = 50;
    std::vector<float> x = randn(n, 44, 0.01f);
    for (size_t k = 0; k < 50; ++k) x[k] *= 1e6f;  // group 0: M > 65504, clipped
    for (int bits : {2, 4, 8}) {
      const QuantizeSpec spec{bits, group, false, true};
      std::vector<uint8_t> wire(static_cast<size_t>(quantize_wire_bytes(n, spec)));
      quantize_encode(x, wire, spec, compress_stream(0));
      std::vector<float> q(n);
      quantize_decode(wire, q, spec);
      const size_t code_bytes = (n * bits + 7) / 8;
      for (size_t j = 0; j < n / group; ++j) {
        uint16_t h;
        std::memcpy(&h, wire.data() + code_bytes + 2 * j, 2);
        const double mh = half_bits_to_float(h);
        double m = 0;
        for (size_t k = j * group; k < (j + 1) * group; ++k)
          m = std::max(m, std::fabs(double{x[k]}));
        CAPTURE(bits);
        CAPTURE(j);
        if (m > 65504.0) {
          CHECK(mh == 65504.0);
          continue;
        }
        CHECK(mh >= m);                                             // rounded up
        CHECK(float_to_half_bits(static_cast<float>(m)) >= h - 1);  // by at most one fp16 ulp
        const double step = 2.0 * mh / std::ldexp(1.0, bits);
        for (size_t k = j * group; k < (j + 1) * group; ++k) {
          CHECK(std::fabs(double{q[k]} - x[k]) <= step + 2.0 * kU * mh);
        }
      }
    }
  }

  TEST_CASE("§1 stochastic rounding is unbiased inside the clamp range: E[Q(y)] = y") {
    // R = 4000 independent streams (different step numbers). Q(y_k) takes the
    // two neighbouring levels with probabilities p, 1−p: SE of the mean =
    // step·sqrt(p(1−p)/R). Bound 5 SE + 1e-6·step (the 24-bit uniform's bias
    // is ≤ 2^-24·step): false-failure probability ≤ 64·5.7e-7 ≈ 4e-5 per
    // configuration under the normal approximation (the seed is fixed anyway).
    const size_t n = 64, group = 16;
    const std::vector<float> y = randn(n, 8);
    constexpr int kR = 4000;
    for (int bits : {2, 4}) {
      const QuantizeSpec spec{bits, group, true, false};
      std::vector<double> mean(n, 0.0);
      std::vector<float> q(n);
      for (int r = 0; r < kR; ++r) {
        quantize_dequantize(y, q, spec, compress_stream(static_cast<uint64_t>(r) + 1), 0);
        for (size_t k = 0; k < n; ++k) mean[k] += q[k];
      }
      int tested = 0;
      for (size_t j = 0; j < n / group; ++j) {
        double m = 0;
        for (size_t k = j * group; k < (j + 1) * group; ++k)
          m = std::max(m, std::fabs(double{y[k]}));
        const double step = 2.0 * m / std::ldexp(1.0, bits);
        for (size_t k = j * group; k < (j + 1) * group; ++k) {
          const double v = y[k] / step;
          if (v > std::ldexp(1.0, bits - 1) - 1) continue;  // clamped top band: biased
          const double p = v - std::floor(v);
          const double se = step * std::sqrt(p * (1 - p) / kR);
          CAPTURE(bits);
          CAPTURE(k);
          CHECK(std::fabs(mean[k] / kR - y[k]) <= 5 * se + 1e-6 * step);
          ++tested;
        }
      }
      CHECK(tested > static_cast<int>(n / 2));
    }
  }

  TEST_CASE("quantize: stochastic draws are element-addressed (first_index splits agree)") {
    const std::vector<float> x = randn(300, 12);
    const QuantizeSpec spec{3, 50, true, false};
    std::vector<float> whole(300), parts(300);
    quantize_dequantize(x, whole, spec, compress_stream(5), 0);
    quantize_dequantize(std::span(x).first(100), std::span(parts).first(100), spec,
                        compress_stream(5), 0);
    quantize_dequantize(std::span(x).subspan(100), std::span(parts).subspan(100), spec,
                        compress_stream(5), 100);
    CHECK(bit_equal(whole, parts));
  }

  TEST_CASE("§7 binarize: E[q] = z and Var[q] = 1 − z²") {
    // N = 20000 draws per z (element-addressed draws of one call are
    // independent). SE of the mean = sqrt((1−z²)/N) ≤ 0.0071; bound 5 SE +
    // 1e-6 (probability rounding): false-failure ≤ 8·5.7e-7 (normal approx.).
    // Var: q² = 1 always, so the sample variance 1 − m̂² is within
    // 2|z|·5SE + (5SE)² of 1 − z² whenever the mean check passes.
    const std::vector<float> zs = {-1.0f, -0.9f, -0.5f, -0.1f, 0.0f, 0.3f, 0.77f, 1.0f};
    constexpr size_t kN = 20000;
    std::vector<float> x(zs.size() * kN);
    for (size_t k = 0; k < x.size(); ++k) x[k] = zs[k % zs.size()];
    std::vector<float> q(x.size());
    make(R"({"name": "binarize"})")->apply(x, q, compress_stream(3));
    for (size_t i = 0; i < zs.size(); ++i) {
      double s = 0, s2 = 0;
      for (size_t k = i; k < x.size(); k += zs.size()) {
        s += q[k];
        s2 += double{q[k]} * q[k];
      }
      const double z = zs[i], mean = s / kN, var = s2 / kN - mean * mean;
      const double se = std::sqrt((1.0 - z * z) / kN);
      CAPTURE(z);
      CHECK(s2 == double(kN));  // every q is ±1
      CHECK(std::fabs(mean - z) <= 5 * se + 1e-6);
      CHECK(std::fabs(var - (1.0 - z * z)) <= 2 * std::fabs(z) * 5 * se + 25 * se * se + 1e-6);
    }
    // Out-of-range inputs are clamped: |x| ≥ 1 is deterministic.
    const std::vector<float> big = {5.0f, -3.0f, 1.0f, -1.0f};
    std::vector<float> out(4);
    make(R"({"name": "binarize"})")->apply(big, out, compress_stream(1));
    CHECK(out == std::vector<float>{1.0f, -1.0f, 1.0f, -1.0f});
  }

  TEST_CASE("randomk with shared_seed: workers with the same stream keep the same indices") {
    const auto c = make(R"({"name": "randomk", "ratio": 0.05})");
    const auto* rk = dynamic_cast<const RandomkCompressor*>(c.get());
    REQUIRE(rk != nullptr);
    const size_t n = 4099;
    const std::vector<float> x0 = randn(n, 1), x1 = randn(n, 2);
    std::vector<float> c0(n), c1(n);
    const RngStream shared = compress_stream(17, 0);
    c->apply(x0, c0, shared);
    c->apply(x1, c1, shared);
    const auto idx = rk->indices(n, shared);
    const std::vector<uint32_t> kept(idx.begin(), idx.end());
    CHECK(kept.size() == 205);  // round(0.05·4099)
    CHECK(std::adjacent_find(kept.begin(), kept.end(), std::greater_equal<>()) == kept.end());
    for (size_t k = 0, j = 0; k < n; ++k) {
      const bool is_kept = j < kept.size() && kept[j] == k;
      CHECK((c0[k] != 0.0f) == is_kept);
      CHECK((c1[k] != 0.0f) == is_kept);
      if (is_kept) {
        CHECK(c0[k] == x0[k]);
        ++j;
      }
    }
    // A different stream (another worker's) picks a different set.
    const auto other = rk->indices(n, compress_stream(17, 1));
    CHECK_FALSE(std::equal(other.begin(), other.end(), kept.begin(), kept.end()));
    // k = n keeps everything.
    const auto all = make(R"({"name": "randomk", "ratio": 1.0})");
    std::vector<float> out(n);
    all->apply(x0, out, shared);
    CHECK(out == x0);
  }

  TEST_CASE("randomk with rescale is unbiased: E[C(x)] = x") {
    // C_k = x_k·n/k with probability k/n: Var = x_k²(n/k − 1). R = 20000
    // streams: SE = |x_k|·sqrt((n/k − 1)/R); 5 SE bound, false-failure
    // ≤ 50·5.7e-7 (normal approx.), deterministic seed.
    const size_t n = 50;
    const auto c = make(R"({"name": "randomk", "k": 5, "rescale": true})");
    const std::vector<float> x = randn(n, 3);
    constexpr int kR = 20000;
    std::vector<double> mean(n, 0.0);
    std::vector<float> out(n);
    std::vector<int> hits(n, 0);
    for (int r = 0; r < kR; ++r) {
      c->apply(x, out, compress_stream(static_cast<uint64_t>(r)));
      for (size_t k = 0; k < n; ++k) {
        mean[k] += out[k];
        hits[k] += out[k] != 0.0f;
      }
    }
    for (size_t k = 0; k < n; ++k) {
      const double se = std::fabs(x[k]) * std::sqrt((double(n) / 5 - 1) / kR);
      CAPTURE(k);
      CHECK(std::fabs(mean[k] / kR - x[k]) <= 5 * se + 1e-6);
    }
    CHECK(std::accumulate(hits.begin(), hits.end(), 0) == 5 * kR);  // exactly k per call
  }

  TEST_CASE("topk keeps exactly the k largest magnitudes, ties by lower index") {
    const std::vector<float> x = {1.0f, -3.0f, 3.0f, 2.0f, -3.0f, 0.0f, 3.0f};
    std::vector<float> out(x.size());
    make(R"({"name": "topk", "k": 2})")->apply(x, out, compress_stream(0));
    CHECK(out == std::vector<float>{0, -3, 3, 0, 0, 0, 0});
    make(R"({"name": "topk", "k": 3})")->apply(x, out, compress_stream(0));
    CHECK(out == std::vector<float>{0, -3, 3, 0, -3, 0, 0});
    make(R"({"name": "topk", "k": 100})")->apply(x, out, compress_stream(0));
    CHECK(out == x);
    // Against a brute-force stable sort, with many ties (values on a coarse grid).
    for (size_t n : {9, 63, 1000, 4099}) {
      std::vector<float> y = randn(n, 60 + n);
      for (auto& v : y) v = std::round(v * 4.0f) / 4.0f;
      const auto c = make(R"({"name": "topk", "ratio": 0.1})");
      std::vector<float> got(n);
      c->apply(y, got, compress_stream(0));
      std::vector<size_t> order(n);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t a, size_t b) { return std::fabs(y[a]) > std::fabs(y[b]); });
      const size_t k = std::max<size_t>(1, std::llround(0.1 * n));
      std::vector<float> want(n, 0.0f);
      for (size_t j = 0; j < k; ++j) want[order[j]] = y[order[j]];
      CAPTURE(n);
      CHECK(bit_equal(got, want));
    }
  }

  TEST_CASE("§1 classic error feedback telescopes: Σ_t C(h_t) = Σ_t g_t − e_T (sign, T = 1000)") {
    // fp32: h_t = fl(g_t + e_t) and e_{t+1} = fl(h_t − ĥ_t) each round once,
    // so Σĥ − (Σg − e_T) = Σ_t (δ_t + ε_t) with |δ_t| ≤ u|h_t|,
    // |ε_t| ≤ u|e_{t+1}|. The test accumulates that bound per element (in
    // double, ×1.001) and checks the residual against it, + 1e-9 for the
    // double sums.
    const size_t len = 257;
    constexpr int kT = 1000;
    ErrorFeedbackOptions o;
    o.kind = "classic";
    ErrorFeedback ef(o, 2, len);
    const auto c = make(R"({"name": "sign"})");
    std::vector<double> sum_c(len, 0), sum_g(len, 0), bound(len, 0);
    std::vector<float> h(len), ch(len);
    for (int t = 0; t < kT; ++t) {
      const std::vector<float> g = randn(len, 10000 + t, 1.0f + 0.5f * std::sin(t * 0.1f));
      ef.begin_step(t + 1);
      ef.compensate(1, g, h);
      c->apply(h, ch, compress_stream(t));
      ef.update(1, h, ch);
      const auto e = ef.error(1);
      for (size_t k = 0; k < len; ++k) {
        sum_c[k] += ch[k];
        sum_g[k] += g[k];
        bound[k] += 1.001 * kU * (std::fabs(double{h[k]}) + std::fabs(double{e[k]}));
      }
    }
    const auto e = ef.error(1);
    double worst = 0;
    for (size_t k = 0; k < len; ++k) {
      const double r = sum_c[k] - (sum_g[k] - e[k]);
      worst = std::max(worst, std::fabs(r) / (bound[k] + 1e-9));
      CHECK(std::fabs(r) <= bound[k] + 1e-9);
    }
    MESSAGE("worst residual / bound = " << worst);
    // Worker 0 was never touched.
    for (float v : ef.error(0)) CHECK(v == 0.0f);
  }

  TEST_CASE(
      "§6 LoCo identity (ema, exact storage, 4-bit): Σ_{t<T} ĥ_t = Σ_{t<T} g_t − "
      "e_T/(1−β)") {
    // Update order h_t = g_t + e_t, ĥ_t = Q(h_t), e_{t+1} = βe_t + (1−β)(h_t − ĥ_t)
    // gives ĥ_t = g_t + (e_t − e_{t+1})/(1−β), which telescopes (e_0 = 0).
    // β is the fp32 value of 0.8 and 1−β is exact in fp32 (Sterbenz), so the
    // identity holds for the fp32 weights. Roundings per step: δ_t in h
    // (≤ u|h_t|) and ε_t in e_{t+1} (≤ 3u(β|e_t| + (1−β)|h_t−ĥ_t| + |e_{t+1}|),
    // three roundings); the residual is Σ(δ_t + ε_t/(1−β)), bounded per
    // element by the accumulated bound (×1.001) + 1e-9.
    const size_t len = 300;
    constexpr int kT = 1000;
    ErrorFeedbackOptions o;
    o.kind = "ema";
    o.beta = 0.8;
    ErrorFeedback ef(o, 1, len);
    const auto c = make(R"({"name": "nbit", "bits": 4})");
    const double beta = static_cast<float>(0.8), one_minus = 1.0 - beta;
    std::vector<double> sum_c(len, 0), sum_g(len, 0), bound(len, 0);
    std::vector<float> h(len), ch(len), e_prev(len, 0.0f);
    for (int t = 0; t < kT; ++t) {
      const std::vector<float> g = randn(len, 20000 + t);
      ef.begin_step(t + 1);
      ef.compensate(0, g, h);
      c->apply(h, ch, compress_stream(t));
      ef.update(0, h, ch);
      const auto e = ef.error(0);
      for (size_t k = 0; k < len; ++k) {
        sum_c[k] += ch[k];
        sum_g[k] += g[k];
        const double d = double{h[k]} - ch[k];
        bound[k] +=
            1.001 * kU *
            (std::fabs(double{h[k]}) + 3.0 *
                                           (beta * std::fabs(double{e_prev[k]}) +
                                            one_minus * std::fabs(d) + std::fabs(double{e[k]})) /
                                           one_minus);
        e_prev[k] = e[k];
      }
    }
    double worst = 0;
    for (size_t k = 0; k < len; ++k) {
      const double r = sum_c[k] - (sum_g[k] - e_prev[k] / one_minus);
      worst = std::max(worst, std::fabs(r) / (bound[k] + 1e-9));
      CHECK(std::fabs(r) <= bound[k] + 1e-9);
    }
    MESSAGE("worst residual / bound = " << worst);
  }

  TEST_CASE("§6 LoCo bound: max|e_t| ≤ G/7 per group at 4 bits (G = largest |g| so far)") {
    // |h − Q4(h)| ≤ M/8 (one step; M = max|h| ≤ G + E), so E' ≤ βE + (1−β)(G+E)/8,
    // whose fixed point is G/7 for every β. Checked per element and step
    // against the group's G, with 1e-5 relative slack for fp32.
    const size_t len = 512, group = 128;
    for (double beta : {0.0, 0.8}) {
      ErrorFeedbackOptions o;
      o.kind = "ema";
      o.beta = beta;
      ErrorFeedback ef(o, 2, len);
      const auto c = make(R"({"name": "nbit", "bits": 4, "group_size": 128})");
      std::vector<double> g_max(2 * len / group, 0.0);
      std::vector<float> h(len), ch(len);
      int violations = 0;
      double worst = 0;
      for (int t = 0; t < 600; ++t) {
        for (int w = 0; w < 2; ++w) {
          // scales vary over time and heavy tails appear now and then
          std::vector<float> g = randn(len, 30000 + 2 * t + w, std::exp(std::sin(t * 0.05f)));
          if (t % 13 == 0) {
            for (auto& v : g) v = v * v * v;
          }
          for (size_t k = 0; k < len; ++k) {
            double& gm = g_max[w * (len / group) + k / group];
            gm = std::max(gm, std::fabs(double{g[k]}));
          }
          ef.compensate(w, g, h);
          c->apply(h, ch, compress_stream(t, w));
          ef.update(w, h, ch);
          const auto e = ef.error(w);
          for (size_t k = 0; k < len; ++k) {
            const double lim = g_max[w * (len / group) + k / group] / 7.0;
            worst = std::max(worst, std::fabs(double{e[k]}) / lim);
            violations += std::fabs(double{e[k]}) > lim * (1 + 1e-5);
          }
        }
      }
      CAPTURE(beta);
      CHECK(violations == 0);
      MESSAGE("beta " << beta << ": max |e|/(G/7) = " << worst);
    }
  }

  TEST_CASE("§6 reset every T steps zeroes the error (steps T+1, 2T+1, ...)") {
    ErrorFeedbackOptions o;
    o.kind = "ema";
    o.reset_every = 4;
    ErrorFeedback ef(o, 1, 40);
    const auto c = make(R"({"name": "nbit", "bits": 2, "group_size": 8})");
    std::vector<float> h(40), ch(40);
    for (int step = 1; step <= 12; ++step) {
      ef.begin_step(step);
      const bool zero =
          std::all_of(ef.error(0).begin(), ef.error(0).end(), [](float v) { return v == 0.0f; });
      CAPTURE(step);
      CHECK(zero == (step == 1 || step == 5 || step == 9));
      const std::vector<float> g = randn(40, 70 + step);
      ef.compensate(0, g, h);
      c->apply(h, ch, compress_stream(step));
      ef.update(0, h, ch);
    }
    // reset_every = 0 never resets; reset() always does.
    o.reset_every = 0;
    ErrorFeedback never(o, 1, 40);
    const std::vector<float> g = randn(40, 5);
    never.compensate(0, g, h);
    c->apply(h, ch, compress_stream(0));
    never.update(0, h, ch);
    never.begin_step(1025);
    CHECK(std::any_of(never.error(0).begin(), never.error(0).end(),
                      [](float v) { return v != 0.0f; }));
    never.reset();
    CHECK(std::all_of(never.error(0).begin(), never.error(0).end(),
                      [](float v) { return v == 0.0f; }));
  }

  TEST_CASE("§6 8-bit error storage keeps e within one 8-bit step of the exact value") {
    // e_stored = Q8(e_exact) with groups of storage_group: one step is
    // 2M/256 (M = group max of e_exact), + 2^-23·M fp32 slack.
    const size_t len = 1000, group = 64;
    ErrorFeedbackOptions o;
    o.kind = "ema";
    o.storage_bits = 8;
    o.storage_group = group;
    ErrorFeedback ef(o, 1, len);
    const auto c = make(R"({"name": "nbit", "bits": 4})");
    const float b = static_cast<float>(0.8), cw = 1.0f - b;
    std::vector<float> h(len), ch(len), exact(len);
    int bad = 0;
    for (int t = 0; t < 200; ++t) {
      const std::vector<float> g = randn(len, 40000 + t);
      const std::vector<float> prev(ef.error(0).begin(), ef.error(0).end());
      ef.compensate(0, g, h);
      c->apply(h, ch, compress_stream(t));
      ef.update(0, h, ch);
      for (size_t k = 0; k < len; ++k) exact[k] = b * prev[k] + cw * (h[k] - ch[k]);
      const auto e = ef.error(0);
      for (size_t j = 0; j * group < len; ++j) {
        double m = 0;
        for (size_t k = j * group; k < std::min(len, (j + 1) * group); ++k)
          m = std::max(m, std::fabs(double{exact[k]}));
        for (size_t k = j * group; k < std::min(len, (j + 1) * group); ++k) {
          bad += std::fabs(double{e[k]} - exact[k]) > 2.0 * m / 256.0 + 4.0 * kU * m;
        }
      }
    }
    CHECK(bad == 0);
  }

  TEST_CASE("error feedback with resident workers [2, 4) of 5: the same rows, 2/5 of the bytes") {
    // Under the MPI backend a rank holds its own block's errors only. Fed the same
    // inputs, workers 2 and 3 of a resident-only buffer match the
    // all-workers one bit for bit (ema, 8-bit storage, a reset on the way).
    ErrorFeedbackOptions o;
    o.kind = "ema";
    o.storage_bits = 8;
    o.storage_group = 16;
    o.reset_every = 3;
    const size_t len = 100;
    ErrorFeedback all(o, 5, len), part(o, 5, len, WorkerRange{2, 4});
    CHECK(part.local().begin == 2);
    CHECK(part.local().end == 4);
    CHECK(all.local().size() == 5);
    CHECK(all.resident_bytes() == 5 * len * sizeof(float));
    CHECK(part.resident_bytes() == 2 * len * sizeof(float));
    const auto c = make(R"({"name": "nbit", "bits": 2})");
    std::vector<float> h_all(len), h_part(len), ch(len);
    for (int t = 1; t <= 5; ++t) {
      all.begin_step(t);
      part.begin_step(t);
      for (int i = 2; i < 4; ++i) {
        const std::vector<float> g = randn(len, 700 + 10 * t + i);
        all.compensate(i, g, h_all);
        part.compensate(i, g, h_part);
        CHECK(h_all == h_part);
        c->apply(h_all, ch, compress_stream(t, i));
        all.update(i, h_all, ch);
        part.update(i, h_part, ch);
        CHECK(std::ranges::equal(all.error(i), part.error(i)));
      }
    }
    CHECK(std::ranges::any_of(part.error(3), [](float v) { return v != 0.0f; }));
    CHECK_THROWS_AS(ErrorFeedback(o, 5, len, WorkerRange{3, 6}), std::invalid_argument);
  }

  TEST_CASE("error feedback \"none\": h = x and no error is kept") {
    ErrorFeedback ef(ErrorFeedbackOptions{}, 3, 10);
    const std::vector<float> x = randn(10, 1);
    std::vector<float> h(10);
    ef.compensate(2, x, h);
    CHECK(h == x);
    ef.update(2, h, h);
    CHECK(ef.error(2).empty());
  }

  TEST_CASE("schema errors name the field and the rule") {
    CHECK(config_error(R"({"name": "nbit", "bits": 9})") == "compressor.bits = 9: must be <= 8");
    CHECK(config_error(R"({"name": "nbit", "bits": 0})") == "compressor.bits = 0: must be >= 1");
    CHECK(config_error(R"({"name": "nbit", "group_size": 0})") ==
          "compressor.group_size = 0: must be >= 1");
    CHECK(config_error(R"({"name": "nbit", "rounding": "nearst"})") ==
          "compressor.rounding = \"nearst\": must be one of \"nearest\", \"stochastic\"; did you "
          "mean \"nearest\"?");
    CHECK(config_error(R"({"name": "nbit", "scale_dtype": "bf16"})")
              .starts_with("compressor.scale_dtype = \"bf16\": must be one of \"fp32\", \"fp16\""));
    CHECK(config_error(R"({"name": "topk", "ratio": 0})") == "compressor.ratio = 0: must be > 0");
    CHECK(config_error(R"({"name": "randomk", "ratio": 1.5})") ==
          "compressor.ratio = 1.5: must be <= 1");
    CHECK(config_error(R"({"name": "topk", "k": -1})") == "compressor.k = -1: must be >= 0");
    CHECK(config_error(R"({"name": "randomk", "shared_seed": 1})") ==
          "compressor.shared_seed = 1: must be true or false");
    CHECK(config_error(R"({"name": "sign", "scale": "l2"})")
              .starts_with("compressor.scale = \"l2\": must be one of \"rms\", \"l1\""));
    CHECK(config_error(R"({"name": "nbitt"})")
              .starts_with("compressor.name = \"nbitt\": must be one of"));
    CHECK(config_error(R"({"name": "nbitt"})").find("did you mean \"nbit\"") != std::string::npos);
    CHECK(config_error(R"({"bits": 4})").starts_with("compressor.name = null: missing"));
    CHECK(config_error(R"({"name": "nbit", "bitz": 4})")
              .starts_with("compressor.bitz = 4: unknown key; did you mean \"bits\"?"));
    CHECK(config_error(R"({"name": "identity", "ratio": 1})")
              .starts_with("compressor.ratio = 1: unknown key"));

    const auto ef_error = [](const std::string& json) -> std::string {
      try {
        ErrorFeedbackOptions::schema().read(Json::parse(json), "optimizer.error_feedback");
      } catch (const ConfigError& e) {
        return e.what();
      }
      return "(no error)";
    };
    CHECK(ef_error(R"({"storage_bits": 16})") ==
          "optimizer.error_feedback.storage_bits = 16: must be 8 or 32");
    CHECK(ef_error(R"({"beta": 1})") == "optimizer.error_feedback.beta = 1: must be in [0, 1)");
    CHECK(ef_error(R"({"kind": "emma"})")
              .starts_with("optimizer.error_feedback.kind = \"emma\": must be one of"));
    CHECK(ef_error(R"({"reset_every": -1})") ==
          "optimizer.error_feedback.reset_every = -1: must be >= 0");
    CHECK(ef_error(R"({"kind": "ema", "storage_bits": 8})") == "(no error)");
  }

  TEST_CASE("registry: every compressor resolves with defaults and documents every option") {
    for (const auto& e : compressor_registry()) {
      CAPTURE(e.name);
      CHECK_FALSE(e.summary.empty());
      for (const auto& f : e.fields) {
        CAPTURE(f.name);
        CHECK_FALSE(f.doc.empty());
        if (f.type != "bool") CHECK_FALSE(f.rule.empty());
      }
      const Json resolved = e.resolve(Json{{"name", e.name}}, "compressor");
      CHECK(resolved["name"] == e.name);
      CHECK(e.make(resolved)->name() == e.name);
    }
    const Json nbit =
        find_entry(compressor_registry(), "nbit")->resolve(Json{{"name", "nbit"}}, "compressor");
    CHECK(nbit == Json::parse(R"({"name": "nbit", "bits": 4, "group_size": 128,
                                  "rounding": "nearest", "scale_dtype": "fp32"})"));
    const auto sign_l1 = make(R"({"name": "sign", "scale": "l1"})");
    const auto* sc = dynamic_cast<const SignCompressor*>(sign_l1.get());
    REQUIRE(sc != nullptr);
    const std::vector<float> x = {1.0f, -3.0f};
    CHECK(sc->scale_of(x) == 2.0f);
    const auto nbit2 = make(R"({"name": "nbit", "bits": 3, "group_size": 7,
                                "rounding": "stochastic", "scale_dtype": "fp16"})");
    const auto& spec = dynamic_cast<const NbitCompressor&>(*nbit2).spec();
    CHECK(spec.bits == 3);
    CHECK(spec.group_size == 7);
    CHECK(spec.stochastic);
    CHECK(spec.fp16_scale);
  }
}
