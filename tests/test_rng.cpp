#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "sim/core/normal_math.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"

using namespace bitlab;

TEST_SUITE("rng") {
  TEST_CASE("Philox4x32-10 matches the Random123 known-answer test") {
    // Known-answer vectors of Random123 (kat_vectors: philox4x32 10 rounds).
    auto out = philox4x32_10({0, 0, 0, 0}, {0, 0});
    CHECK(out == PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
    out = philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                        {0xffffffffu, 0xffffffffu});
    CHECK(out == PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
    out = philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                        {0xa4093822u, 0x299f31d0u});
    CHECK(out == PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
  }

  TEST_CASE("streams are pure functions of (seed, purpose, worker, step, index)") {
    RngStream a(7, Purpose::kTest, 3, 11), b(7, Purpose::kTest, 3, 11);
    CHECK(a.block(12345) == b.block(12345));
    CHECK(a.block(0) != RngStream(8, Purpose::kTest, 3, 11).block(0));
    CHECK(a.block(0) != RngStream(7, Purpose::kData, 3, 11).block(0));
    CHECK(a.block(0) != RngStream(7, Purpose::kTest, 4, 11).block(0));
    CHECK(a.block(0) != RngStream(7, Purpose::kTest, 3, 12).block(0));
    // steps beyond 2^32 differ too (the high half goes into the key)
    CHECK(RngStream(7, Purpose::kTest, 0, 1).block(0) !=
          RngStream(7, Purpose::kTest, 0, (1ull << 32) + 1).block(0));
  }

  TEST_CASE("fill_normal is element-addressed: any split gives the same values") {
    RngStream rng(1, Purpose::kTest);
    std::vector<float> whole(1001), parts(1001);
    fill_normal(rng, whole, 2.0f);
    // three uneven pieces, as different thread counts would cut it
    fill_normal(rng, std::span<float>(parts).subspan(0, 5), 2.0f, 0);
    fill_normal(rng, std::span<float>(parts).subspan(5, 502), 2.0f, 5);
    fill_normal(rng, std::span<float>(parts).subspan(507), 2.0f, 507);
    CHECK(whole == parts);
  }

  TEST_CASE("every dispatched variant of fill_normal gives the scalar reference's bits") {
    // The scalar reference: normals_of_block on Philox blocks one at a time.
    // Every instruction set this CPU supports must match it bit for bit, for
    // ranges that start and end inside blocks and cover several kernel batches
    // (32 blocks each), and at block indices above 2^32.
    const RngStream rng(9, Purpose::kGradNoise, 5, 77);
    const uint64_t starts[] = {0, 1, 3, 130, (uint64_t{1} << 34) + 2};
    const size_t sizes[] = {0, 1, 3, 4, 5, 127, 128, 129, 4099};
    const std::vector<Isa> isas = supported_isas();
    MESSAGE("variants checked on this CPU: " << isas.size());
    for (uint64_t first : starts) {
      for (size_t n : sizes) {
        std::vector<float> ref(n);
        for (size_t k = 0; k < n; ++k) {
          const uint64_t g = first + k;
          const PhiloxBlock b = rng.block(g / 4);
          ref[k] = normal_math::normals_of_block(b[0], b[1], b[2], b[3], 0.5f).z[g % 4];
        }
        for (Isa isa : isas) {
          std::vector<float> got(n, -1.0f);
          fill_normal_isa(isa, rng, got, 0.5f, first);
          INFO("isa " << std::string(isa_name(isa)) << ", first " << first << ", n " << n);
          // n = 0: empty vectors may hold null data(), which memcmp must
          // never get (UBSan), even for 0 bytes.
          CHECK((n == 0 || std::memcmp(got.data(), ref.data(), n * sizeof(float)) == 0));
        }
      }
    }
  }

  TEST_CASE("the normal transform's log and sincos are accurate over every input") {
    // Every one of the 2^24 codes k (u = k/2^24) against double-precision
    // references, relative to float's unit roundoff 2^-24 ≈ 6e-8. Bounds: a few
    // ulp — the series are truncated below 4e-10 (normal_math.hpp), the rest is
    // rounding in ~10 float operations. -2 ln u is checked relative to
    // max(|-2 ln u|, 1e-6) because it vanishes at u = 1; sin/cos absolutely
    // (|values| ≤ 1).
    double worst_log = 0, worst_trig = 0;
    for (int32_t k = 1; k <= (1 << 24); ++k) {
      const double u = k / 16777216.0;
      const double ref_log = -2.0 * std::log(u);
      const double got_log = normal_math::minus_two_log_unit(k);
      worst_log = std::max(worst_log, std::fabs(got_log - ref_log) / std::max(ref_log, 1e-6));
      const normal_math::SinCos sc = normal_math::sincos_two_pi_unit(k);
      const double t = 2.0 * M_PI * u;
      worst_trig = std::max(worst_trig,
                            std::max(std::fabs(sc.s - std::sin(t)), std::fabs(sc.c - std::cos(t))));
    }
    MESSAGE("worst relative error of -2 ln u: " << worst_log << ", of sin/cos: " << worst_trig);
    CHECK(worst_log < 4 * 5.97e-8);
    CHECK(worst_trig < 4 * 5.97e-8);
  }

  TEST_CASE("BITLAB_ISA names are checked") {
    CHECK(parse_isa("avx2") == Isa::kAvx2);
    CHECK_THROWS_WITH_AS(parse_isa("neon"), doctest::Contains("must be one of sse2, avx2, avx512"),
                         ConfigError);
  }

  TEST_CASE("normal and uniform moments") {
    // n = 200000 draws: the standard error of the mean is 1/sqrt(n) = 0.0022
    // (normal) and of the variance sqrt(2/n) = 0.0032; 5 sigma bounds give a
    // false-failure probability below 1e-6 (and the seed is fixed anyway).
    constexpr int n = 200000;
    std::vector<float> z(n);
    fill_normal(RngStream(3, Purpose::kTest), z, 1.0f);
    double s = 0, s2 = 0;
    for (float v : z) {
      s += v;
      s2 += double{v} * v;
    }
    CHECK(std::fabs(s / n) < 5 * 0.0023);
    CHECK(std::fabs(s2 / n - 1.0) < 5 * 0.0032);

    RngStream seq(4, Purpose::kTest);
    double us = 0, ns = 0, ns2 = 0;
    for (int i = 0; i < n; ++i) {
      us += seq.next_uniform();
      const double x = seq.next_normal();
      ns += x;
      ns2 += x * x;
    }
    CHECK(std::fabs(us / n - 0.5) < 5 * 0.29 / std::sqrt(n));  // sd of U(0,1) = 0.2887
    CHECK(std::fabs(ns / n) < 5 * 0.0023);
    CHECK(std::fabs(ns2 / n - 1.0) < 5 * 0.0032);
  }

  TEST_CASE("next_below is in range and hits every value; gamma has mean = shape") {
    RngStream rng(5, Purpose::kTest);
    std::vector<int> hits(7, 0);
    for (int i = 0; i < 7000; ++i) {
      const auto v = rng.next_below(7);
      REQUIRE(v < 7);
      ++hits[v];
    }
    for (int h : hits) CHECK(h > 800);  // expected 1000, sd 29
    for (double shape : {0.3, 1.0, 4.5}) {
      double s = 0;
      constexpr int n = 100000;
      for (int i = 0; i < n; ++i) s += rng.next_gamma(shape);
      // Var = shape: 5 standard errors of the mean.
      CHECK(std::fabs(s / n - shape) < 5 * std::sqrt(shape / n));
    }
  }
}
