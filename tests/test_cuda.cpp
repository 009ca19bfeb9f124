// Suite `cuda`: the CUDA kernels (sim/cuda/) against their CPU
// references (sim/kernels/cpu_kernels.hpp), which are the simulator's own code
// path. The comparison harness is itself tested on CPU data first (a planted
// difference must be caught and reported), so the GPU checks cannot pass by
// comparing nothing. Without a GPU (or without a CUDA build) the GPU cases
// say that they skipped and why; tests/cuda/run.sh runs the suite, the
// sanitizer and the benchmark on a GPU machine in one command.
//
// Tolerances (see sim/cuda/kernels.hpp for why):
//   - packed bits, bytes: identical;
//   - elementwise updates, decode, LoCo's dequantize-reduce: identical (same bits, or both NaN: the
//     GPU's NaN is 0x7fffffff, x86's default NaN 0xffc00000);
//   - the 1-bit scales: at most 1 ulp apart (double sums in a different
//     order within a 4096-block, rounded to float); the errors then differ by
//     at most the scale difference plus 1 ulp of the error.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/core/rng.hpp"
#include "sim/cuda/kernels.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {
namespace {

// ---------------------------------------------------------------------------
// Comparison harness.

// got ≈ want when their bits are equal, both are NaN, or (finite tolerance)
// |got − want| ≤ abs + rel·|want|.
struct Tolerance {
  double abs = 0.0;
  double rel = 0.0;
};

bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b) ||
         (std::isnan(a) && std::isnan(b));
}

bool close_float(float got, float want, const Tolerance& tol) {
  if (same_float(got, want)) return true;
  // A zero tolerance means identity (so −0 vs +0 is a mismatch there).
  if (tol.abs == 0.0 && tol.rel == 0.0) return false;
  if (!std::isfinite(got) || !std::isfinite(want)) return false;
  const double diff = std::fabs(static_cast<double>(got) - want);
  return diff <= tol.abs + tol.rel * std::fabs(static_cast<double>(want));
}

// Number of mismatches and a report of the first `kShown`.
struct Mismatches {
  size_t count = 0;
  std::string report;
};
constexpr size_t kShown = 8;

Mismatches compare_floats(const std::vector<float>& got, const std::vector<float>& want,
                          const Tolerance& tol, const std::string& what) {
  Mismatches r;
  std::ostringstream os;
  os.precision(9);
  if (got.size() != want.size()) {
    r.count = 1;
    os << what << ": size " << got.size() << " != " << want.size();
    r.report = os.str();
    return r;
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (close_float(got[k], want[k], tol)) continue;
    if (r.count < kShown) {
      os << "  " << what << "[" << k << "]: got " << got[k] << " (0x" << std::hex
         << std::bit_cast<uint32_t>(got[k]) << "), want " << want[k] << " (0x"
         << std::bit_cast<uint32_t>(want[k]) << std::dec << ")\n";
    }
    ++r.count;
  }
  if (r.count) r.report = what + ": " + std::to_string(r.count) + " mismatches\n" + os.str();
  return r;
}

Mismatches compare_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                         const std::string& what) {
  Mismatches r;
  std::ostringstream os;
  if (got.size() != want.size()) {
    r.count = 1;
    r.report = what + ": size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
    return r;
  }
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k] == want[k]) continue;
    if (r.count < kShown) {
      os << "  " << what << "[" << k << "]: got 0x" << std::hex << int{got[k]} << ", want 0x"
         << int{want[k]} << std::dec << "\n";
    }
    ++r.count;
  }
  if (r.count) r.report = what + ": " + std::to_string(r.count) + " mismatches\n" + os.str();
  return r;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) {
  return std::llabs(static_cast<int64_t>(std::bit_cast<int32_t>(a)) -
                    static_cast<int64_t>(std::bit_cast<int32_t>(b)));
}

#define CHECK_SAME(m)           \
  do {                          \
    const Mismatches mm_ = (m); \
    INFO(mm_.report);           \
    CHECK(mm_.count == 0);      \
  } while (0)

// Named outputs of a scenario; each compared for identity.
using Named = std::vector<std::pair<std::string, std::vector<float>>>;

void check_identical(const Named& got, const Named& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_SAME(compare_floats(got[i].second, want[i].second, {}, want[i].first));
}

// ---------------------------------------------------------------------------
// One set of functions with the references' signatures: the CPU twins
// on host memory, or the CUDA kernels on device memory. A scenario written
// once against a KernelSet runs on either, and the outputs are compared.

#define BITLAB_KERNEL_LIST(X) \
  X(onebit_worker_compress)   \
  X(onebit_server_reduce)     \
  X(onebit_decode)            \
  X(adam_update)              \
  X(onebit_adam_momentum)     \
  X(onebit_adam_update)       \
  X(zero_one_local_step)      \
  X(zero_one_scale_u)         \
  X(zero_one_sync)            \
  X(binarize_pack)            \
  X(quantize_groups)          \
  X(ema_error_update)         \
  X(dequantize_reduce)

struct KernelSet {
  const char* name;
  void* (*alloc)(size_t);
  void (*release)(void*);
  void (*upload)(void*, const void*, size_t);
  void (*download)(void*, const void*, size_t);
  void (*sync)();
  // One function pointer per kernel, named as the kernel.
#define BITLAB_KERNEL_FIELD(f) decltype(&cpu::f) f;
  BITLAB_KERNEL_LIST(BITLAB_KERNEL_FIELD)
#undef BITLAB_KERNEL_FIELD
};

void* host_alloc(size_t bytes) {
  return ::operator new(std::max<size_t>(bytes, 1));
}
void host_release(void* p) {
  ::operator delete(p);
}
void host_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void host_sync() {}

#define BITLAB_CPU_KERNEL(f) cpu::f,
#define BITLAB_GPU_KERNEL(f) cuda::f,
const KernelSet kCpu{"cpu",
                     host_alloc,
                     host_release,
                     host_copy,
                     host_copy,
                     host_sync,
                     BITLAB_KERNEL_LIST(BITLAB_CPU_KERNEL)};
const KernelSet kGpu{"gpu",
                     cuda::device_alloc,
                     cuda::device_free,
                     cuda::copy_to_device,
                     cuda::copy_to_host,
                     cuda::device_synchronize,
                     BITLAB_KERNEL_LIST(BITLAB_GPU_KERNEL)};
#undef BITLAB_CPU_KERNEL
#undef BITLAB_GPU_KERNEL

// The numbered variants of the GPU's 1-bit worker stage, as functions with
// the reference's signature (to swap into a KernelSet).
template <int V>
void worker_variant(const float* b, size_t d, float* e, size_t D, uint8_t* bits, float* scale) {
  cuda::onebit_worker_compress_variant(V, b, d, e, D, bits, scale);
}
constexpr decltype(&cpu::onebit_worker_compress) kWorkerVariants[] = {worker_variant<1>,
                                                                      worker_variant<2>};
static_assert(std::size(kWorkerVariants) == cuda::kWorkerCompressVariants);

// `count` elements of T in a KernelSet's memory, filled from / read back to
// host vectors.
template <class T>
class Buf {
 public:
  Buf(const KernelSet& k, size_t count) : k_(&k), count_(count) {
    p_ = static_cast<T*>(k.alloc(count * sizeof(T)));
  }
  Buf(const KernelSet& k, const std::vector<T>& host) : Buf(k, host.size()) { set(host); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { k_->release(p_); }
  T* get() const { return p_; }
  void set(const std::vector<T>& host) { k_->upload(p_, host.data(), count_ * sizeof(T)); }
  std::vector<T> host() const {
    std::vector<T> out(count_);
    k_->sync();
    k_->download(out.data(), p_, count_ * sizeof(T));
    return out;
  }

 private:
  const KernelSet* k_;
  size_t count_;
  T* p_ = nullptr;
};

// Skips (with the reason) when no GPU answers; with BITLAB_REQUIRE_GPU set
// (tests/cuda/run.sh) a missing GPU fails instead.
bool gpu_or_skip() {
  std::string why;
  if (cuda::device_available(&why)) return true;
  if (std::getenv("BITLAB_REQUIRE_GPU")) {
    FAIL_CHECK("BITLAB_REQUIRE_GPU is set but there is no usable CUDA device: " << why);
  } else {
    MESSAGE("skipped: no usable CUDA device (" << why << ")");
  }
  return false;
}

// ---------------------------------------------------------------------------
// Inputs: uniform in [−1, 1) from RngStream(seed, kTest, stream), with the
// awkward values planted: exact zeros (±0), ties (runs of equal values),
// denormals, and, when `with_inf`, ±inf.
std::vector<float> awkward(size_t n, uint32_t stream, bool with_inf = false, float scale = 1.0f) {
  const RngStream rng(2024, Purpose::kTest, stream);
  std::vector<float> x(n);
  for (size_t k = 0; k < n; ++k) {
    x[k] = scale * (2.0f * u32_to_unit_open0(rng.block(k / 4)[k % 4]) - 1.0f);
    switch (k % 13) {
      case 3:
        x[k] = 0.0f;
        break;
      case 5:
        x[k] = -0.0f;
        break;
      case 7:
        x[k] = scale * 0.25f;
        break;  // ties: the same value again and again
      case 11:
        x[k] = (k % 2 ? 1 : -1) * std::numeric_limits<float>::denorm_min() * 3;
        break;
      default:
        break;
    }
  }
  if (with_inf && n > 2) {
    x[n / 2] = std::numeric_limits<float>::infinity();
    x[n / 3] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

const size_t kSizes[] = {1, 7, 8 * 1000 - 1, (size_t{1} << 22) + 3};
constexpr int kWorkers = 4;

// Outputs of the 1-bit allreduce's three stages on one KernelSet.
struct OneBitOutputs {
  std::vector<float> worker_e, worker_scales, server_s, server_scales, out;
  std::vector<uint8_t> worker_bits, server_bits;
};

// Worker stage from (b_i, e_i) of every worker; the server stage from
// `server_in` (the worker bits and scales, fed identically to both sides so
// that each stage is tested on its own); the decode from `decode_in`.
OneBitOutputs run_onebit(const KernelSet& k, size_t d, bool with_inf,
                         const OneBitOutputs* server_in, const OneBitOutputs* decode_in) {
  const int n = kWorkers;
  const size_t D = onebit_padded_dim(std::max<size_t>(d, 1), n), chunk = D / n;
  OneBitOutputs o;
  Buf<float> e(k, D * n), scales(k, n), s(k, D), acc(k, D), cs(k, n), out(k, d);
  Buf<uint8_t> bits(k, D / 8 * n), sbits(k, D / 8);
  std::vector<float> e0(D * n);
  for (int i = 0; i < n; ++i) {
    const std::vector<float> ei = awkward(D, 100 + i, false, 0.1f);
    std::copy(ei.begin(), ei.end(), e0.begin() + i * D);
  }
  e.set(e0);
  for (int i = 0; i < n; ++i) {
    Buf<float> b(k, awkward(d, i, with_inf));
    k.onebit_worker_compress(b.get(), d, e.get() + i * D, D, bits.get() + i * (D / 8),
                             scales.get() + i);
    k.sync();
  }
  o.worker_e = e.host();
  o.worker_scales = scales.host();
  o.worker_bits = bits.host();
  if (server_in) {
    bits.set(server_in->worker_bits);
    scales.set(server_in->worker_scales);
  }
  s.set(awkward(D, 200, false, 0.05f));
  for (int r = 0; r < n; ++r) {
    k.onebit_server_reduce(bits.get() + r * (chunk / 8), D / 8, scales.get(), n, chunk,
                           s.get() + r * chunk, acc.get() + r * chunk,
                           sbits.get() + r * (chunk / 8), cs.get() + r);
  }
  o.server_s = s.host();
  o.server_scales = cs.host();
  o.server_bits = sbits.host();
  if (decode_in) {
    sbits.set(decode_in->server_bits);
    cs.set(decode_in->server_scales);
  }
  k.onebit_decode(sbits.get(), cs.get(), n, D, d, out.get());
  o.out = out.host();
  return o;
}

// Scales within 1 ulp (both NaN counts as equal); errors within the scale
// difference plus 1 ulp (2^−23 relative) of the error.
void check_scales_and_errors(const std::vector<float>& got_scales,
                             const std::vector<float>& want_scales, const std::vector<float>& got_e,
                             const std::vector<float>& want_e, const char* what) {
  REQUIRE(got_scales.size() == want_scales.size());
  float worst = 0.0f;
  for (size_t r = 0; r < got_scales.size(); ++r) {
    INFO(what << " scale " << r << ": got " << got_scales[r] << ", want " << want_scales[r]);
    if (same_float(got_scales[r], want_scales[r])) continue;
    REQUIRE(std::isfinite(want_scales[r]));
    CHECK(ulp_distance(got_scales[r], want_scales[r]) <= 1);
    worst = std::max(worst, std::fabs(got_scales[r] - want_scales[r]));
  }
  CHECK_SAME(compare_floats(got_e, want_e, {1.01 * worst, 0x1p-23}, what));
}

// ---------------------------------------------------------------------------
// A short training run with the compression and update path on a KernelSet
// (n = 4, d = 10^5, 200 steps): a noisy quadratic, loss
// L(x) = mean_k ½ h_k (x_k − t_k)², worker i's gradient h ⊙ (x_i − t) + 0.1·ξ
// with ξ = N(0, 1) from RngStream(7, kGradNoise, i, step). Gradients and the
// loss are computed on the host from the downloaded parameters, the same way
// for both sets, so any difference comes from the kernels. The warm-up
// (steps 1..20) is plain Adam without bias correction on the exact mean
// gradient; then 1-bit Adam's compression stage (OneBitAdam::compressed_step)
// or 0/1 Adam's local steps with a 1-bit sync every 5 steps
// (ZeroOneAdam::stage_b; 0/1 Adam's 1-bit stage-A steps are left out).
enum class Algo { kOneBitAdam, kZeroOneAdam };

struct Training {
  static constexpr int kSteps = 200, kWarmup = 20, kSyncEvery = 5;
  static constexpr size_t kDim = 100000;
  static constexpr double kLr = 1e-2;
  std::vector<float> h, t;
  Training() : h(kDim), t(kDim) {
    const RngStream rng(7, Purpose::kTest, 0);
    for (size_t k = 0; k < kDim; ++k) {
      const PhiloxBlock r = rng.block(k);
      h[k] = 0.1f + 0.9f * u32_to_unit_open0(r[0]);
      t[k] = 2.0f * u32_to_unit_open0(r[1]) - 1.0f;
    }
  }
  double loss(const std::vector<float>& x) const {
    double s = 0.0;
    for (size_t k = 0; k < kDim; ++k) {
      const double r = static_cast<double>(x[k]) - t[k];
      s += 0.5 * h[k] * r * r;
    }
    return s / kDim;
  }
  void grad(const std::vector<float>& x, int worker, int step, std::vector<float>& g) const {
    fill_normal(RngStream(7, Purpose::kGradNoise, static_cast<uint32_t>(worker), step), g, 0.1f);
    for (size_t k = 0; k < kDim; ++k) g[k] += h[k] * (x[k] - t[k]);
  }

  std::vector<double> run(const KernelSet& k, Algo algo) const {
    const int n = kWorkers;
    const size_t d = kDim, D = onebit_padded_dim(d, n), chunk = D / n;
    std::vector<double> curve;
    std::vector<float> zeros(d, 0.0f), g(d), gbar(d);
    Buf<float> x(k, zeros), m(k, zeros), v(k, zeros), gb(k, d), gw(k, d * n), mw(k, d * n);
    Buf<float> e(k, std::vector<float>(D * n, 0.0f)), s(k, std::vector<float>(D, 0.0f));
    Buf<float> acc(k, D), scales(k, n), cs(k, n), den(k, d), xw(k, d * n), uw(k, d * n);
    Buf<uint8_t> bits(k, D / 8 * n), sbits(k, D / 8);
    // out ← 1-bit allreduce of the n buffers at in (stride d): §1's three stages.
    auto onebit_allreduce = [&](const float* in, float* out) {
      for (int i = 0; i < n; ++i)
        k.onebit_worker_compress(in + i * d, d, e.get() + i * D, D, bits.get() + i * (D / 8),
                                 scales.get() + i);
      for (int r = 0; r < n; ++r)
        k.onebit_server_reduce(bits.get() + r * (chunk / 8), D / 8, scales.get(), n, chunk,
                               s.get() + r * chunk, acc.get() + r * chunk,
                               sbits.get() + r * (chunk / 8), cs.get() + r);
      k.onebit_decode(sbits.get(), cs.get(), n, D, d, out);
    };
    const ZeroOneLocalCoeffs lc{static_cast<float>(kLr), 0.9f, static_cast<float>(1.0 - 0.9), 0.0f};
    double lrs = 0.0;
    std::vector<float> xs(d * n);
    for (int step = 1; step <= kSteps; ++step) {
      const AdamCoeffs c = make_adam_coeffs(kLr, 0.9, 0.999, 1e-8, 0.0, false, step);
      const bool local = algo == Algo::kZeroOneAdam && step > kWarmup;
      if (!local) {
        const std::vector<float> xh = x.host();
        curve.push_back(loss(xh));
        std::vector<float> all(d * n);
        for (int i = 0; i < n; ++i) {
          grad(xh, i, step, g);
          std::copy(g.begin(), g.end(), all.begin() + i * d);
        }
        gw.set(all);
        if (step <= kWarmup) {  // exact mean gradient, fixed order 0..n−1
          for (size_t j = 0; j < d; ++j) {
            float sum = 0.0f;
            for (int i = 0; i < n; ++i) sum += all[i * d + j];
            gbar[j] = sum / static_cast<float>(n);
          }
          gb.set(gbar);
          k.adam_update(x.get(), m.get(), v.get(), gb.get(), d, c);
          if (step == kWarmup && algo == Algo::kZeroOneAdam) {
            // Transition: den = sqrt(v) + ε; every worker starts from x, m.
            std::vector<float> vh = v.host(), dh(d);
            for (size_t j = 0; j < d; ++j) dh[j] = std::sqrt(vh[j]) + 1e-8f;
            den.set(dh);
            const std::vector<float> x0 = x.host(), m0 = m.host();
            for (int i = 0; i < n; ++i) {
              std::copy(x0.begin(), x0.end(), xs.begin() + i * d);
              std::copy(m0.begin(), m0.end(), all.begin() + i * d);
            }
            xw.set(xs);
            mw.set(all);
            uw.set(std::vector<float>(d * n, 0.0f));
          }
          continue;
        }
        for (int i = 0; i < n; ++i)
          k.onebit_adam_momentum(m.get(), gw.get() + i * d, d, mw.get() + i * d, c);
        onebit_allreduce(mw.get(), m.get());
        k.onebit_adam_update(x.get(), m.get(), v.get(), nullptr, d, c);
        continue;
      }
      // 0/1 Adam stage B: local steps on every worker's copy.
      xs = xw.host();
      curve.push_back(loss(std::vector<float>(xs.begin(), xs.begin() + d)));
      std::vector<float> all(d * n);
      for (int i = 0; i < n; ++i) {
        grad(std::vector<float>(xs.begin() + i * d, xs.begin() + (i + 1) * d), i, step, g);
        std::copy(g.begin(), g.end(), all.begin() + i * d);
      }
      gw.set(all);
      for (int i = 0; i < n; ++i)
        k.zero_one_local_step(xw.get() + i * d, mw.get() + i * d, uw.get() + i * d,
                              gw.get() + i * d, den.get(), d, lc);
      lrs += kLr;
      if ((step - kWarmup) % kSyncEvery != 0) continue;
      for (int i = 0; i < n; ++i) k.zero_one_scale_u(uw.get() + i * d, den.get(), d);
      onebit_allreduce(uw.get(), gb.get());  // ū
      k.zero_one_sync(mw.get(), x.get(), gb.get(), den.get(), d, lrs);
      const std::vector<float> x0 = x.host(), m0 = mw.host();
      for (int i = 0; i < n; ++i) {
        std::copy(x0.begin(), x0.end(), xs.begin() + i * d);
        std::copy(m0.begin(), m0.begin() + d, all.begin() + i * d);
      }
      xw.set(xs);
      mw.set(all);
      uw.set(std::vector<float>(d * n, 0.0f));
      lrs = 0.0;
    }
    return curve;
  }
};

}  // namespace

TEST_SUITE("cuda") {
  // ---- the harness, on CPU data: it must catch and report a planted
  // difference, and accept what it claims to accept.
  TEST_CASE("harness: a planted float difference is caught and reported") {
    std::vector<float> want = awkward(1000, 1);
    std::vector<float> got = want;
    CHECK(compare_floats(got, want, {}, "x").count == 0);
    got[417] = std::nextafter(got[417], 2.0f);  // one ulp
    const Mismatches m = compare_floats(got, want, {}, "x");
    CHECK(m.count == 1);
    CHECK(m.report.find("x[417]") != std::string::npos);
    // 1 ulp of a normal float is at most 2^−23 of it, so rel 2^−22 accepts it.
    CHECK(compare_floats(got, want, {0.0, 0x1p-22}, "x").count == 0);
    // −0 vs +0 is a difference in bits (identity means identity).
    std::vector<float> z1{0.0f}, z2{-0.0f};
    CHECK(compare_floats(z1, z2, {}, "z").count == 1);
    // Both NaN (any payload) match; NaN vs a number and inf vs −inf do not.
    std::vector<float> a{std::bit_cast<float>(0x7fffffffu), std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> b{std::bit_cast<float>(0xffc00000u), -std::numeric_limits<float>::infinity(),
                         1.0f};
    const Mismatches nm = compare_floats(a, b, {1e30, 1.0}, "n");
    CHECK(nm.count == 2);
    CHECK(nm.report.find("n[1]") != std::string::npos);
    CHECK(nm.report.find("n[2]") != std::string::npos);
    // Only the first kShown mismatches are listed, all are counted.
    std::vector<float> many(100, 1.0f), other(100, 2.0f);
    const Mismatches mm = compare_floats(many, other, {}, "m");
    CHECK(mm.count == 100);
    CHECK(mm.report.find("m[7]") != std::string::npos);
    CHECK(mm.report.find("m[8]") == std::string::npos);
    CHECK(compare_floats(many, std::vector<float>(99, 1.0f), {}, "s").count == 1);
  }

  TEST_CASE("harness: a planted bit flip in a packed image is caught") {
    // The CPU 1-bit path against itself, then with one bit flipped.
    const OneBitOutputs a = run_onebit(kCpu, 8 * 1000 - 1, false, nullptr, nullptr);
    const OneBitOutputs b = run_onebit(kCpu, 8 * 1000 - 1, false, nullptr, nullptr);
    CHECK_SAME(compare_bytes(b.worker_bits, a.worker_bits, "bits"));
    CHECK_SAME(compare_bytes(b.server_bits, a.server_bits, "server_bits"));
    CHECK_SAME(compare_floats(b.out, a.out, {}, "out"));
    std::vector<uint8_t> flipped = a.worker_bits;
    flipped[123] ^= 0x10;
    const Mismatches m = compare_bytes(flipped, a.worker_bits, "bits");
    CHECK(m.count == 1);
    CHECK(m.report.find("bits[123]") != std::string::npos);
    CHECK(ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)) == 1);
    CHECK(ulp_distance(0.0f, std::numeric_limits<float>::denorm_min()) == 1);
  }

  // ---- the CPU twins' layout conventions, which the kernels copy.
  TEST_CASE("reference conventions: MSB first, sign(±0) = +1, NaN = −1, padding untouched") {
    const size_t d = 11, D = 16;
    std::vector<float> b(d, -1.0f), e(D, 0.0f);
    b[0] = 0.0f;
    b[1] = -0.0f;
    b[2] = std::numeric_limits<float>::quiet_NaN();
    b[9] = 2.0f;
    e[15] = -0.0f;  // padding: must stay −0 + nothing, then −0 − a
    std::vector<uint8_t> bits(D / 8);
    float a = 0.0f;
    cpu::onebit_worker_compress(b.data(), d, e.data(), D, bits.data(), &a);
    CHECK(std::isnan(a));  // the NaN poisons the norm, as it should
    // Byte 0: elements 0..7 = +0, −0, NaN, −1 × 5 → 1 1 0 0 0 0 0 0.
    CHECK(int{bits[0]} == 0xC0);
    // Byte 1: 8 = −1, 9 = +2, 10 = −1, padding 11..14 = +0 (+1), 15 = −0 (+1).
    CHECK(int{bits[1]} == 0x5F);
  }

  TEST_CASE("reference conventions: binarize_pack is the compressor's apply, packed") {
    for (size_t d : {size_t{1}, size_t{7}, size_t{8 * 100 - 1}}) {
      const std::vector<float> z = awkward(d, 9, true, 1.5f);
      const RngStream rng(5, Purpose::kCompress, 2, 17);
      std::vector<float> q(d);
      BinarizeCompressor().apply(z, q, rng);
      std::vector<uint8_t> bits((d + 7) / 8, 0xFF);
      cpu::binarize_pack(z.data(), d, rng, bits.data());
      for (size_t k = 0; k < d; ++k) {
        INFO("d = " << d << ", k = " << k);
        CHECK(((bits[k / 8] >> (7 - k % 8)) & 1) == (q[k] > 0 ? 1 : 0));
      }
      if (d % 8) CHECK((bits.back() & ((1u << (8 - d % 8)) - 1)) == 0);  // unused bits 0
    }
  }

  // ---- the kernels against the references.
  TEST_CASE("1-bit allreduce kernels match the CPU: worker, server, decode") {
    if (!gpu_or_skip()) return;
    for (size_t d : kSizes) {
      for (bool with_inf : {false, true}) {
        CAPTURE(d);
        CAPTURE(with_inf);
        const OneBitOutputs want = run_onebit(kCpu, d, with_inf, nullptr, nullptr);
        const OneBitOutputs got = run_onebit(kGpu, d, with_inf, &want, &want);
        CHECK_SAME(compare_bytes(got.worker_bits, want.worker_bits, "worker_bits"));
        check_scales_and_errors(got.worker_scales, want.worker_scales, got.worker_e, want.worker_e,
                                "worker_e");
        CHECK_SAME(compare_bytes(got.server_bits, want.server_bits, "server_bits"));
        check_scales_and_errors(got.server_scales, want.server_scales, got.server_s, want.server_s,
                                "server_s");
        CHECK_SAME(compare_floats(got.out, want.out, {}, "out"));
      }
    }
  }

  TEST_CASE("every numbered variant of the 1-bit worker stage matches the CPU") {
    if (!gpu_or_skip()) return;
    for (int variant = 1; variant <= cuda::kWorkerCompressVariants; ++variant) {
      KernelSet k = kGpu;
      k.onebit_worker_compress = kWorkerVariants[variant - 1];
      for (size_t d : kSizes) {
        for (bool with_inf : {false, true}) {
          CAPTURE(variant);
          CAPTURE(d);
          CAPTURE(with_inf);
          const OneBitOutputs want = run_onebit(kCpu, d, with_inf, nullptr, nullptr);
          const OneBitOutputs got = run_onebit(k, d, with_inf, &want, &want);
          CHECK_SAME(compare_bytes(got.worker_bits, want.worker_bits, "worker_bits"));
          check_scales_and_errors(got.worker_scales, want.worker_scales, got.worker_e,
                                  want.worker_e, "worker_e");
        }
        // b one float past an aligned address (variant 2 then reads b element
        // by element) and e as run_onebit places it.
        CAPTURE(variant);
        CAPTURE(d);
        const size_t D = onebit_padded_dim(std::max<size_t>(d, 1), kWorkers);
        std::vector<float> b0(d + 1, 0.0f);
        const std::vector<float> x = awkward(d, 21), e0 = awkward(D, 22, false, 0.1f);
        std::copy(x.begin(), x.end(), b0.begin() + 1);
        auto run = [&](const KernelSet& ks) {
          Buf<float> b(ks, b0), e(ks, e0), scale(ks, 1);
          Buf<uint8_t> bits(ks, D / 8);
          ks.onebit_worker_compress(b.get() + 1, d, e.get(), D, bits.get(), scale.get());
          return std::make_tuple(bits.host(), scale.host(), e.host());
        };
        const auto [want_bits, want_scale, want_e] = run(kCpu);
        const auto [got_bits, got_scale, got_e] = run(k);
        CHECK_SAME(compare_bytes(got_bits, want_bits, "bits (b misaligned)"));
        check_scales_and_errors(got_scale, want_scale, got_e, want_e, "e (b misaligned)");
      }
    }
    // An unknown variant number is refused before anything is launched.
    CHECK_THROWS_AS(
        cuda::onebit_worker_compress_variant(3, nullptr, 0, nullptr, 8, nullptr, nullptr),
        std::invalid_argument);
  }

  TEST_CASE("elementwise kernels (Adam, 1-bit Adam, 0/1 Adam) are bit-identical to the CPU") {
    if (!gpu_or_skip()) return;
    const AdamCoeffs bc = make_adam_coeffs(1e-3, 0.9, 0.999, 1e-8, 0.01, true, 7);
    const AdamCoeffs nc = make_adam_coeffs(1e-3, 0.9, 0.999, 1e-8, 0.01, false, 7);
    const ZeroOneLocalCoeffs lc{1e-3f, 0.9f, static_cast<float>(1.0 - 0.9), 0.01f};
    for (size_t d : kSizes) {
      for (bool with_inf : {false, true}) {
        CAPTURE(d);
        CAPTURE(with_inf);
        const std::vector<float> x0 = awkward(d, 1, with_inf), g0 = awkward(d, 2, with_inf);
        const std::vector<float> m0 = awkward(d, 3, false, 0.1f);
        std::vector<float> v0 = awkward(d, 4, false, 0.01f), den0(d), mask(d);
        for (size_t k = 0; k < d; ++k) {
          v0[k] = std::fabs(v0[k]);  // a second moment is ≥ 0 (denormals and 0 kept)
          den0[k] = std::sqrt(v0[k]) + 1e-8f;
          mask[k] = k % 3 ? 1.0f : 0.0f;
        }
        auto run = [&](const KernelSet& k) {
          Buf<float> x(k, x0), m(k, m0), v(k, v0), g(k, g0), mw(k, d), den(k, den0), mk(k, mask);
          Buf<float> u(k, awkward(d, 6, false, 1e-3f)), ms(k, d);
          k.adam_update(x.get(), m.get(), v.get(), g.get(), d, bc);
          k.onebit_adam_momentum(m.get(), g.get(), d, mw.get(), nc);
          k.onebit_adam_update(x.get(), mw.get(), v.get(), mk.get(), d, nc);
          k.onebit_adam_update(x.get(), m.get(), v.get(), nullptr, d, nc);
          k.zero_one_local_step(x.get(), m.get(), u.get(), g.get(), den.get(), d, lc);
          k.zero_one_scale_u(u.get(), den.get(), d);
          k.zero_one_sync(ms.get(), x.get(), u.get(), den.get(), d, 7e-3);
          return Named{{"x", x.host()},         {"m", m.host()}, {"v", v.host()},
                       {"m_worker", mw.host()}, {"u", u.host()}, {"m_sync", ms.host()}};
        };
        check_identical(run(kGpu), run(kCpu));
      }
    }
  }

  TEST_CASE("BinSGDM binarization kernel draws the CPU's random numbers") {
    if (!gpu_or_skip()) return;
    for (size_t d : kSizes) {
      CAPTURE(d);
      const std::vector<float> z = awkward(d, 8, true, 1.5f);
      const RngStream rng(11, Purpose::kCompress, 3, 42);
      auto run = [&](const KernelSet& k) {
        Buf<float> zb(k, z);
        Buf<uint8_t> bits(k, (d + 7) / 8);
        k.binarize_pack(zb.get(), d, rng, bits.get());
        return bits.host();
      };
      CHECK_SAME(compare_bytes(run(kGpu), run(kCpu), "binarized"));
    }
  }
  TEST_CASE("n-bit group quantizer and LoCo's error feedback kernels are bit-identical") {
    if (!gpu_or_skip()) return;
    // 4-bit nearest (LoCo's), 4-bit stochastic, 8-bit with fp16 scales and a
    // group size that divides nothing, 1-bit with tiny groups.
    const QuantizeSpec specs[] = {
        {4, 128, false, false}, {4, 128, true, false}, {8, 100, false, true}, {1, 7, true, true}};
    for (size_t d : kSizes) {
      for (bool with_inf : {false, true}) {
        for (const QuantizeSpec& spec : specs) {
          CAPTURE(d);
          CAPTURE(with_inf);
          CAPTURE(spec.bits);
          CAPTURE(spec.group_size);
          CAPTURE(spec.stochastic);
          CAPTURE(spec.fp16_scale);
          const std::vector<float> x = awkward(d, 12, with_inf, 3.0f);
          const RngStream rng(13, Purpose::kCompress, 1, 9);
          auto run = [&](const KernelSet& k) {
            Buf<float> xb(k, x), qb(k, d), inplace(k, x), e(k, awkward(d, 14, false, 0.01f));
            k.quantize_groups(xb.get(), d, qb.get(), spec, rng, 5);
            k.quantize_groups(inplace.get(), d, inplace.get(), spec, rng, 5);  // x and out alias
            k.ema_error_update(e.get(), xb.get(), qb.get(), d,
                               0.8f);  // LoCo: e = βe + (1−β)(h − Q(h))
            // In place must give what out-of-place gives (both compared to the
            // CPU's out-of-place result).
            const std::vector<float> q = qb.host();
            return Named{{"Q(x)", q}, {"Q(x) in place", inplace.host()}, {"ema error", e.host()}};
          };
          Named want = run(kCpu);
          want[1].second = want[0].second;
          check_identical(run(kGpu), want);
        }
      }
    }
  }

  TEST_CASE("reference conventions: the worker-tree program sums in mean_over_workers' order") {
    // What the CUDA dequantize-reduce runs per element (worker_tree_sum over
    // the program) against the simulator's mean (cpu::dequantize_reduce),
    // bit for bit, for every n up to 20 and a few larger ones.
    const size_t len = 37, stride = 40;
    for (int n :
         {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 31, 33, 64, 100}) {
      CAPTURE(n);
      const std::vector<int32_t> program = worker_tree_program(n);
      REQUIRE(program.size() == 2 * static_cast<size_t>(n) - 1);
      std::vector<float> q(stride * n);
      for (int i = 0; i < n; ++i) {
        // Magnitudes spread over 2^−8..2^8 so the summation order shows in the bits.
        const std::vector<float> x = awkward(len, 40 + i, i == n / 2, std::ldexp(1.0f, i % 17 - 8));
        std::copy(x.begin(), x.end(), q.begin() + i * stride);
      }
      std::vector<float> want(len), got(len);
      cpu::dequantize_reduce(q.data(), stride, n, len, want.data());
      for (size_t k = 0; k < len; ++k)
        got[k] = worker_tree_sum(program.data(), program.size(), q.data() + k, stride) /
                 static_cast<float>(n);
      CHECK_SAME(compare_floats(got, want, {}, "tree mean"));
    }
    // The order is observable, so the check above can fail: for n = 3 the
    // tree is q0 + (q1 + q2); summing 0, 1, 2 in sequence gives another result.
    const std::vector<float> q{1.0f, 1e8f, -1e8f};
    const std::vector<int32_t> p3 = worker_tree_program(3);
    CHECK(p3 == std::vector<int32_t>{0, 1, 2, kWorkerTreeAdd, kWorkerTreeAdd});
    float mean = 0.0f;
    cpu::dequantize_reduce(q.data(), 1, 3, 1, &mean);
    CHECK(mean == 1.0f / 3.0f);
    CHECK(worker_tree_sum(p3.data(), p3.size(), q.data(), 1) == 1.0f);
    CHECK((q[0] + q[1]) + q[2] == 0.0f);  // the sequential order would differ
    CHECK_THROWS_AS(worker_tree_program(0), std::invalid_argument);
  }

  TEST_CASE("LoCo's dequantize-reduce kernel is bit-identical to the CPU") {
    if (!gpu_or_skip()) return;
    const QuantizeSpec spec{4, 128, false, false};  // LoCo's 4-bit codes
    for (size_t d : kSizes) {
      for (int n : {1, 3, 4, 16}) {
        for (bool with_inf : {false, true}) {
          CAPTURE(d);
          CAPTURE(n);
          CAPTURE(with_inf);
          // Worker i's dequantized values at i·stride; the gap after each
          // holds NaN, which must not reach the mean.
          const size_t stride = d + 5;
          std::vector<float> q(stride * n, std::numeric_limits<float>::quiet_NaN());
          for (int i = 0; i < n; ++i) {
            const std::vector<float> x = awkward(d, 50 + i, with_inf, 1.0f + i);
            float* qi = q.data() + i * stride;
            if (with_inf) {  // raw values: ±inf, denormals, ±0 summed as they are
              std::copy(x.begin(), x.end(), qi);
            } else {
              cpu::quantize_groups(x.data(), d, qi, spec, RngStream(3, Purpose::kCompress, i), 0);
            }
          }
          auto run = [&](const KernelSet& k) {
            Buf<float> qb(k, q), out(k, d);
            k.dequantize_reduce(qb.get(), stride, n, d, out.get());
            return out.host();
          };
          CHECK_SAME(compare_floats(run(kGpu), run(kCpu), {}, "mean"));
        }
      }
    }
  }

  TEST_CASE("training harness on the CPU: the loss falls") {
    // Makes the GPU comparison below meaningful: the run trains (a curve
    // that went nowhere would match trivially).
    const Training tr;
    for (Algo algo : {Algo::kOneBitAdam, Algo::kZeroOneAdam}) {
      const std::vector<double> a = tr.run(kCpu, algo);
      REQUIRE(a.size() == Training::kSteps);
      CHECK(a.back() < 0.2 * a.front());
    }
  }

  TEST_CASE("a short 1-bit Adam and 0/1 Adam run on the GPU follows the CPU's loss curve") {
    if (!gpu_or_skip()) return;
    const Training tr;
    for (Algo algo : {Algo::kOneBitAdam, Algo::kZeroOneAdam}) {
      const char* name = algo == Algo::kOneBitAdam ? "onebit_adam" : "zero_one_adam";
      const std::vector<double> want = tr.run(kCpu, algo), got = tr.run(kGpu, algo);
      REQUIRE(got.size() == want.size());
      // Tolerance: 1e-4 relative per step. Every stage but the two scales is
      // bit-identical; a scale 1 ulp off (6e-8 relative) moves the decoded
      // tensor by that much, and error feedback carries the difference over
      // instead of letting it grow, so we expect drift far below 1e-4 (the
      // test prints the worst figure it saw).
      double worst = 0.0;
      for (size_t s = 0; s < want.size(); ++s) {
        const double rel = std::fabs(got[s] - want[s]) / want[s];
        worst = std::max(worst, rel);
        INFO(name << " step " << s + 1 << ": gpu " << got[s] << ", cpu " << want[s]);
        CHECK(rel <= 1e-4);
      }
      MESSAGE(name << ": worst relative loss difference GPU vs CPU over 200 steps = " << worst);
    }
  }
}

}  // namespace bitlab
