// The dispatched hot loops (sim/kernels/dispatch.hpp): every instruction-set
// variant this CPU supports gives the SSE2 variant's bits on awkward inputs;
// the sum of squares has the lanes dispatch.hpp states; the fused 1-bit Adam
// worker stage (run_momentum) is run() on the momenta bit for bit; and whole runs give identical
// metrics whatever BITLAB_ISA and the thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/core/isa.hpp"
#include "sim/core/rng.hpp"
#include "sim/kernels/dispatch.hpp"
#include "sim/kernels/cpu_kernels.hpp"
#include "tests/cli_fixtures.hpp"

using namespace bitlab;
using isa_kernels::KernelTable;

namespace {

// Uniform in [−scale, scale) with awkward values planted: ±0, denormals, tiny
// and huge magnitudes, ties of equal values and (with_nan) NaN and ±inf.
std::vector<float> awkward(size_t n, uint32_t stream, float scale = 1.0f, bool with_nan = false) {
  const RngStream rng(17, Purpose::kTest, stream);
  std::vector<float> x(n);
  for (size_t k = 0; k < n; ++k) {
    x[k] = scale * (2.0f * u32_to_unit_open0(rng.block(k / 4)[k % 4]) - 1.0f);
    switch (k % 11) {
      case 2:
        x[k] = 0.0f;
        break;
      case 4:
        x[k] = -0.0f;
        break;
      case 6:
        x[k] = k % 2 ? 1e-40f : -3e-39f;
        break;  // denormals
      case 8:
        x[k] = k % 3 ? 3e30f : -1e-30f;
        break;
      case 9:
        x[k] = scale * 0.5f;
        break;
      default:
        break;
    }
    if (with_nan && k % 29 == 5) x[k] = std::numeric_limits<float>::quiet_NaN();
    if (with_nan && k % 31 == 7) x[k] = k % 2 ? INFINITY : -INFINITY;
  }
  return x;
}

std::vector<float> nonnegative(std::vector<float> x) {
  for (float& v : x) v = std::fabs(v);
  return x;
}

// The bytes of everything a kernel wrote, for a bitwise comparison.
struct Blob {
  std::vector<unsigned char> bytes;
  template <class T>
  void add(const std::vector<T>& v) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    bytes.insert(bytes.end(), p, p + v.size() * sizeof(T));
  }
  void add(double v) { add(std::vector<double>{v}); }
  void add(float v) { add(std::vector<float>{v}); }
};

// Runs `kernel` with every variant this CPU supports and checks that each
// writes the SSE2 variant's bytes; AVX-512 is skipped (with the reason) where
// the CPU lacks it.
void check_variants(const std::string& what,
                    const std::function<Blob(const KernelTable&)>& kernel) {
  const Blob want = kernel(isa_kernels::kernel_table(Isa::kSse2));
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    const Blob got = kernel(isa_kernels::kernel_table(isa));
    INFO(what << ": " << std::string(isa_name(isa)) << " vs sse2");
    CHECK(got.bytes == want.bytes);
  }
}

// Sizes around the vector widths (4, 8, 16 floats) and the norm block (4096).
const size_t kSizes[] = {0, 1, 3, 5, 7, 8, 9, 15, 17, 31, 33, 100, 257, 4095, 4096, 4097};

AdamCoeffs coeffs(bool bias_correction) {
  return make_adam_coeffs(3e-3, 0.9, 0.999, 1e-8, 0.01, bias_correction, 7);
}

// Σ x² as dispatch.hpp specifies it, one element at a time: lane k mod 4 for
// the first 4·⌊n/4⌋ elements, the rest into lane 0, then ((l0+l1)+l2)+l3.
double four_lane_sum_squares(const std::vector<float>& x) {
  double l[4] = {0.0, 0.0, 0.0, 0.0};
  const size_t full = x.size() / 4 * 4;
  for (size_t k = 0; k < x.size(); ++k) {
    const double v = static_cast<double>(x[k]) * static_cast<double>(x[k]);
    l[k < full ? k % 4 : 0] += v;
  }
  return ((l[0] + l[1]) + l[2]) + l[3];
}

}  // namespace

TEST_SUITE("kernels") {
  TEST_CASE("the variants this CPU runs, and why one is skipped") {
    for (Isa isa : {Isa::kSse2, Isa::kAvx2, Isa::kAvx512}) {
      if (isa_supported(isa)) {
        CHECK(isa_kernels::kernel_table(isa).isa == isa);
      } else {
        MESSAGE("skipped " << std::string(isa_name(isa))
                           << ": this CPU does not support it (its variant is "
                           << "compiled but cannot run here)");
        CHECK_THROWS_AS(isa_kernels::kernel_table(isa), std::invalid_argument);
      }
    }
    CHECK(isa_kernels::active_kernels().isa == active_isa());
  }

  TEST_CASE("every dispatched variant of the optimizer updates gives SSE2's bits") {
    for (size_t n : kSizes) {
      const auto x0 = awkward(n, 1, 2.0f, true), m0 = awkward(n, 2), g = awkward(n, 3, 5.0f, true);
      const auto v0 = nonnegative(awkward(n, 4, 1e-3f)), mask = nonnegative(awkward(n, 5));
      const std::string at = " n = " + std::to_string(n);
      for (bool bc : {false, true}) {
        check_variants("adam_update" + at, [&](const KernelTable& t) {
          auto x = x0, m = m0, v = v0;
          t.adam_update(x.data(), m.data(), v.data(), g.data(), n, coeffs(bc));
          Blob b;
          b.add(x), b.add(m), b.add(v);
          return b;
        });
      }
      check_variants("onebit_adam_momentum" + at, [&](const KernelTable& t) {
        std::vector<float> out(n);
        t.onebit_adam_momentum(m0.data(), g.data(), n, out.data(), coeffs(false));
        Blob b;
        b.add(out);
        return b;
      });
      for (bool masked : {false, true}) {
        check_variants("onebit_adam_update" + at, [&](const KernelTable& t) {
          auto x = x0, m = m0;
          t.onebit_adam_update(x.data(), m.data(), v0.data(), masked ? mask.data() : nullptr, n,
                               coeffs(false));
          Blob b;
          b.add(x), b.add(m);
          return b;
        });
      }
      const ZeroOneLocalCoeffs lc{3e-3f, 0.9f, 0.1f, 0.01f};
      std::vector<float> den(n);
      for (size_t k = 0; k < n; ++k) den[k] = std::sqrt(v0[k]) + 1e-8f;
      check_variants("zero_one (local step, scale_u, sync)" + at, [&](const KernelTable& t) {
        auto x = x0, m = m0, u = awkward(n, 6);
        t.zero_one_local_step(x.data(), m.data(), u.data(), g.data(), den.data(), n, lc);
        t.zero_one_scale_u(u.data(), den.data(), n);
        t.zero_one_sync(m.data(), x.data(), u.data(), den.data(), n, 0.0123);
        Blob b;
        b.add(x), b.add(m), b.add(u);
        return b;
      });
      check_variants("ema_error_update" + at, [&](const KernelTable& t) {
        auto e = m0;
        t.ema_error_update(e.data(), x0.data(), g.data(), n, 0.9f, 1.0f - 0.9f);
        Blob b;
        b.add(e);
        return b;
      });
    }
  }

  TEST_CASE("every dispatched variant of the 1-bit allreduce's loops gives SSE2's bits") {
    const AdamCoeffs c = coeffs(false);
    for (size_t n : kSizes) {
      const std::string at = " n = " + std::to_string(n);
      const auto e0 = awkward(n, 7), b = awkward(n, 8, 3.0f), m = awkward(n, 9), g = awkward(n, 10);
      for (size_t n_add : {size_t{0}, n / 2, n}) {
        check_variants("sum of squares (plain, add, mean)" + at, [&](const KernelTable& t) {
          Blob out;
          out.add(t.sum_squares(e0.data(), n));
          auto e = e0;
          out.add(t.add_sum_squares(e.data(), b.data(), n_add, n));
          out.add(e);
          e = e0;
          out.add(t.mean_add_sum_squares(e.data(), b.data(), 16.0f, n));
          out.add(e);
          return out;
        });
      }
      const size_t len = n / 8 * 8;
      const auto u0 = awkward(len, 11, 1.0f, true);
      // 1-bit Adam's worker block, with and without a pending update, the
      // momentum added up to n_add (any count, not only whole vectors).
      std::vector<float> table(2048);
      cpu::onebit_sign_table(0.37f, table.data());
      for (size_t n_add : {size_t{0}, len / 2 + 1, len}) {
        for (bool pending : {false, true}) {
          check_variants("momentum_worker_block" + at, [&](const KernelTable& t) {
            auto e = u0;
            std::vector<uint8_t> bits(len / 8);
            for (size_t j = 0; j < bits.size(); ++j) bits[j] = static_cast<uint8_t>(j * 91 + 7);
            Blob out;
            out.add(t.momentum_worker_block(e.data(), bits.data(), pending ? table.data() : nullptr,
                                            m.data(), g.data(), std::min(n_add, n), len, c));
            out.add(e), out.add(bits);
            return out;
          });
        }
      }
      for (float a : {0.0f, 0.37f, 1e-38f}) {
        check_variants("pack_and_subtract" + at, [&](const KernelTable& t) {
          auto u = u0;
          std::vector<uint8_t> bits(len / 8, 0xA5);
          t.pack_and_subtract(u.data(), len, a, bits.data());
          Blob out;
          out.add(u), out.add(bits);
          return out;
        });
      }
      check_variants("expand_accumulate" + at, [&](const KernelTable& t) {
        std::vector<float> table(2048);
        for (int v = 0; v < 256; ++v)
          for (int k = 0; k < 8; ++k) table[8 * v + k] = (v >> (7 - k)) & 1 ? 0.3f : -0.3f;
        std::vector<uint8_t> bytes(len / 8);
        for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(j * 37 + 11);
        auto acc = awkward(len, 12);
        t.expand_accumulate(bytes.data(), bytes.size(), table.data(), acc.data());
        Blob out;
        out.add(acc);
        return out;
      });
    }
  }

  TEST_CASE("every dispatched variant of the n-bit quantizer gives SSE2's bits") {
    for (size_t n : kSizes) {
      const auto y = awkward(n, 13, 4.0f, true);
      for (int bits : {1, 4, 8}) {
        check_variants("max_abs, quantize_nearest, bits " + std::to_string(bits) +
                           ", n = " + std::to_string(n),
                       [&](const KernelTable& t) {
                         const GroupCoder coder(bits);
                         const float m = n ? t.max_abs(y.data(), n) : 1.0f;
                         std::vector<float> out(n), in_place = y;
                         t.quantize_nearest(y.data(), n, coder, 0.7f, 0.7f / coder.half_range,
                                            out.data());
                         // In place (x and out alias in quantize_groups).
                         t.quantize_nearest(in_place.data(), n, coder, 0.7f,
                                            0.7f / coder.half_range, in_place.data());
                         Blob b;
                         b.add(m), b.add(out), b.add(in_place);
                         return b;
                       });
      }
    }
  }

  TEST_CASE("the sum of squares has the lanes dispatch.hpp states (the former SSE2 loop's)") {
    // Element-by-element four-lane sums in double against each variant, bit
    // for bit: values over 60 binades so that a different lane split or
    // combination order would round differently.
    // Plus sums whose value depends on the order: (2^27)² = 2^54 has an ulp
    // of 4, so adding 1.25² = 1.5625 to it one at a time leaves 2^54, while
    // any order that first adds two or more of the small squares does not.
    std::vector<std::vector<float>> inputs;
    for (size_t n : kSizes) {
      auto x = awkward(n, 14, 1.0f);
      for (size_t k = 0; k < n; ++k) x[k] *= std::ldexp(1.0f, static_cast<int>(k % 61) - 30);
      inputs.push_back(x);
    }
    for (size_t n : {size_t{4}, size_t{8}, size_t{33}, size_t{64}}) {
      std::vector<float> x(n, 1.25f);
      x[0] = 134217728.0f;  // 2^27
      inputs.push_back(x);
    }
    // Lanes 2^54, 1, 1.5, 1.5 (about): in the stated order each addition is
    // below half an ulp of 2^54 and vanishes; (l2 + l3) first would not.
    inputs.push_back({134217728.0f, 1.0f, 1.2247449f, 1.2247449f});
    inputs.push_back({134217728.0f, 1.0f, 1.2247449f, 1.2247449f, 0.0f, 0.0f, 0.0f, 0.0f});
    for (const std::vector<float>& x : inputs) {
      const size_t n = x.size();
      const double want = four_lane_sum_squares(x);
      for (Isa isa : supported_isas()) {
        const KernelTable& t = isa_kernels::kernel_table(isa);
        INFO(std::string(isa_name(isa)) << ", n = " << n);
        CHECK(std::bit_cast<uint64_t>(t.sum_squares(x.data(), n)) == std::bit_cast<uint64_t>(want));
        // The worker block sums with the same lanes (whole sign bytes only).
        if (n % 8 == 0) {
          auto e = x;
          std::vector<uint8_t> bits(n / 8);
          const double got = t.momentum_worker_block(e.data(), bits.data(), nullptr, nullptr,
                                                     nullptr, 0, n, coeffs(false));
          CHECK(std::bit_cast<uint64_t>(got) == std::bit_cast<uint64_t>(want));
        }
      }
    }
  }

  TEST_CASE("run_momentum (one pass, error update deferred) is run() on the momenta, bit for bit") {
    // Several calls, m taking the output as 1-bit Adam's m does, with the
    // deferred error read back (settled) after the second call and the slices
    // of a OneBitAllreduceSet: outputs, scales, signs and errors identical.
    const AdamCoeffs c = coeffs(false);
    const int n = 3;
    for (const std::vector<OneBitSlice>& slices :
         {std::vector<OneBitSlice>{{0, 5001}}, std::vector<OneBitSlice>{{0, 37}, {37, 4964}}}) {
      const size_t d = 5001;
      // streamed: the three-part call (begin, add_worker_momentum per worker
      // in reverse order, finish), as 1-bit Adam folds on a streamed
      // cluster; rows: add_worker on the written-out momenta, reversed.
      OneBitAllreduceSet ref(n, slices), fused(n, slices), streamed(n, slices), rows(n, slices);
      Communicator comm_ref(n), comm_fused(n), comm_streamed(n), comm_rows(n);
      std::vector<float> m_ref = awkward(d, 18), m_fused = m_ref, g(n * d), momenta(n * d);
      std::vector<float> m_streamed = m_ref, m_rows = m_ref;
      for (int call = 0; call < 4; ++call) {
        for (int i = 0; i < n; ++i) {
          const auto gi = awkward(d, 100 + 10 * call + i, 2.0f);
          std::copy(gi.begin(), gi.end(), g.begin() + i * d);
          cpu::onebit_adam_momentum(m_ref.data(), g.data() + i * d, d, momenta.data() + i * d, c);
        }
        ref.run(comm_ref, WorkerBuffers{momenta.data(), d, d, n}, m_ref);
        fused.run_momentum(comm_fused, {m_fused.data(), WorkerBuffers{g.data(), d, d, n}, c},
                           m_fused);
        streamed.begin(true);
        rows.begin(false);
        for (int i = n - 1; i >= 0; --i) {
          streamed.add_worker_momentum(i, m_streamed.data(), g.data() + i * d, c);
          std::vector<float> b(d);
          cpu::onebit_adam_momentum(m_rows.data(), g.data() + i * d, d, b.data(), c);
          rows.add_worker(i, b);
        }
        streamed.finish(comm_streamed, m_streamed);
        rows.finish(comm_rows, m_rows);
        INFO("call " << call << ", slices " << slices.size());
        CHECK(std::memcmp(m_fused.data(), m_ref.data(), d * sizeof(float)) == 0);
        CHECK(std::memcmp(m_streamed.data(), m_ref.data(), d * sizeof(float)) == 0);
        CHECK(std::memcmp(m_rows.data(), m_ref.data(), d * sizeof(float)) == 0);
        CHECK(comm_streamed.log().size() == comm_ref.log().size());
        for (size_t p = 0; p < slices.size(); ++p) {
          for (int i = 0; i < n; ++i) {
            CHECK(std::bit_cast<uint32_t>(fused.part(p).worker_scale(i)) ==
                  std::bit_cast<uint32_t>(ref.part(p).worker_scale(i)));
            const auto fb = fused.part(p).worker_bits(i), rb = ref.part(p).worker_bits(i);
            CHECK(std::equal(fb.begin(), fb.end(), rb.begin(), rb.end()));
            if (call == 1 || call == 3) {
              const auto fe = fused.part(p).worker_error(i), re = ref.part(p).worker_error(i);
              CHECK(std::memcmp(fe.data(), re.data(), fe.size() * sizeof(float)) == 0);
            }
          }
        }
      }
    }
  }

  TEST_CASE("whole runs give the same metrics whatever BITLAB_ISA and the thread count") {
    // Adam, 1-bit Adam (warm-up, then the fused compression stage), 0/1 Adam
    // and LoCo (n-bit quantizer), on dims that are not multiples of 8: the
    // SSE2 variant on 1 thread against every other variant this CPU runs on 2.
    using namespace bitlab::testing;
    const char* optimizers[] = {
        R"({"name": "adam", "lr": 0.01})",
        R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 5})",
        R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 6, "local_step_scaler": 4})",
        R"({"name": "loco", "lr": 0.01, "exchange": "flat"})"};
    TempDir dir;
    for (size_t o = 0; o < std::size(optimizers); ++o) {
      const std::string opt = optimizers[o];
      const std::string config = dir.file(
          "exp.json", std::string(R"({"name": "isa", "steps": 24, "eval_every": 6, "seed": 5,
            "problem": {"name": "logistic", "dim": 37, "samples": 512},
            "cluster": {"workers": 4, "batch_size": 8}, "optimizer": )") +
                          opt + "}");
      auto metrics = [&](const std::string& isa, int threads) {
        const IsaRun run = run_with_isa(
            dir, config, "run" + std::to_string(o) + "_" + isa + std::to_string(threads), isa,
            threads);
        INFO(opt << ", " << isa << ": " << run.result.err);
        REQUIRE(run.result.status == 0);
        return run.metrics;
      };
      const std::string want = metrics("sse2", 1);
      CHECK(want.size() > 100);
      for (Isa isa : supported_isas()) {
        INFO(opt << ": " << isa_name(isa) << " on 2 threads vs sse2 on 1");
        CHECK(metrics(isa_name(isa), 2) == want);
      }
    }
  }
}
