// Benchmark of the CUDA kernels, not a test: effective bandwidth of
// each kernel = bytes necessarily touched / time, against the device's peak.
//
//   build/bench_kernels [--repeats N]        (tests/cuda/run.sh runs it)
//
// Method: inputs filled on the device from RngStream(1, kTest); per kernel
// and size, 3 warm-up calls, then N timed calls (default 21), each preceded by
// a write of 2× the L2 size to a scratch buffer (so no input is served from
// L2) and timed with CUDA events around the call alone; the median is
// printed. Peak: the theoretical DRAM bandwidth 2 × memory clock × bus width
// (cudaDevAttrMemoryClockRate, cudaDevAttrGlobalMemoryBusWidth) and, for a
// reachable figure, a measured device-to-device cudaMemcpy of 1 GiB (counted
// as read + write). Percentages are of the measured copy ("%copy") and of the
// theoretical peak ("%peak").
//
// Bytes necessarily touched (each array read or written once, 4 B a float,
// 1 bit a sign; D = d padded to the 1-bit allreduce's multiple, n = 4):
//   worker_compress   read b (4d), read e (4D), write e (4D), write bits
//                     (D/8); the same rule for each numbered variant (_vN)
//                     — our kernels make two passes over e (the scale needs
//                     the whole norm before any sign can be subtracted), so
//                     100 % is out of reach: 2 passes move 4d + 16D + D/8
//   server stage      all n servers: read n·D/8 sign bytes, read + write s
//                     (8D), write D/8 bits (same two-pass caveat)
//   decode            read D/8, write 4d
//   adam              read x m v g, write x m v: 28d
//   onebit_momentum   read m g, write m_i: 12d
//   onebit_update     read x m v, write x m: 20d
//   zero_one_local    read x m u g den, write x m u: 32d
//   zero_one_sync     read ū den x, write m0 x: 20d
//   binarize_pack     read 4d, write d/8
//   quantize_groups   read 4d, write 4d (4-bit, groups of 128, nearest; the
//                     simulator's quantize-dequantize writes floats)
//   ema_error_update  read e h ĥ, write e: 16d
//   dequantize_reduce read the n workers' dequantized values, write the
//                     mean: 4nd + 4d (n = 4: 20d)
//   fp32_to_fp16      read 4d, write 2d (the uncompressed baseline)
// Target (the issue): ≥ 70 % of peak for d ≥ 2^24.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "sim/cuda/kernels.hpp"

namespace {

using namespace bitlab;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "bench_kernels: %s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

__global__ void fill_kernel(float* x, size_t n, RngStream rng, float lo, float span) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    x[k] = lo + span * u32_to_unit_open0(rng.block(k / 4)[k % 4]);
}

void fill(float* x, size_t n, uint32_t worker, float lo, float span) {
  fill_kernel<<<4096, 256>>>(x, n, RngStream(1, Purpose::kTest, worker), lo, span);
  check(cudaGetLastError(), "fill_kernel");
}

struct Timer {
  cudaEvent_t start, stop;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  int repeats = 21;
  Timer() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    int l2 = 0;
    check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0), "L2 size");
    flush_bytes = 2 * static_cast<size_t>(std::max(l2, 1 << 20));
    check(cudaMalloc(&flush, flush_bytes), "cudaMalloc(flush)");
  }
  // Median seconds of f() over `repeats` calls after 3 warm-up calls.
  double median(const std::function<void()>& f) {
    for (int w = 0; w < 3; ++w) f();
    check(cudaDeviceSynchronize(), "warm-up");
    std::vector<double> t;
    for (int r = 0; r < repeats; ++r) {
      check(cudaMemsetAsync(flush, r & 0xFF, flush_bytes), "L2 flush");
      check(cudaEventRecord(start), "cudaEventRecord");
      f();
      check(cudaEventRecord(stop), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      t.push_back(ms * 1e-3);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  int repeats = 21;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--repeats") == 0 && a + 1 < argc && std::atoi(argv[a + 1]) > 0) {
      repeats = std::atoi(argv[++a]);
    } else {
      std::fprintf(stderr, "bench_kernels: usage: bench_kernels [--repeats N] (N >= 1)\n");
      return 2;
    }
  }
  std::string why;
  if (!cuda::device_available(&why)) {
    std::printf("bench_kernels: skipped: %s\n", why.c_str());
    return 0;
  }
  Timer timer;
  timer.repeats = repeats;
  int clock_khz = 0, bus_bits = 0;
  check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0), "memory clock");
  check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "bus width");
  const double peak = 2.0 * clock_khz * 1e3 * (bus_bits / 8.0);
  // Measured device-to-device copy of 1 GiB: read + write.
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, copy_bytes), "cudaMalloc");
  check(cudaMalloc(&dst, copy_bytes), "cudaMalloc");
  const double copy_s = timer.median(
      [&] { check(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice), "copy"); });
  const double copy_bw = 2.0 * copy_bytes / copy_s;
  check(cudaFree(src), "cudaFree");
  check(cudaFree(dst), "cudaFree");
  std::printf(
      "device %s; theoretical peak %.0f GB/s (2 x %d MHz x %d bit); "
      "measured D2D copy %.0f GB/s; median of %d, L2 flushed (%zu MB written)\n",
      cuda::device_name().c_str(), peak / 1e9, clock_khz / 1000, bus_bits, copy_bw / 1e9,
      timer.repeats, timer.flush_bytes >> 20);
  std::printf("%-18s %10s %12s %10s %8s %8s\n", "kernel", "d", "time_us", "GB/s", "%copy", "%peak");
  std::printf(
      "(worker_compress_vN: numbered variants of the 1-bit worker stage, * = the default)\n");

  const int n = 4;
  for (int lg : {20, 24, 26}) {
    const size_t d = size_t{1} << lg;
    const size_t mult = 8 * n;  // the reference's n·lcm(n, 8) for n = 4 is 32
    const size_t D = (d + mult - 1) / mult * mult, chunk = D / n;
    cuda::DeviceArray<float> b(d), e(D), s(D), x(d), m(d), v(d), g(d), u(d), den(d), out(d);
    cuda::DeviceArray<uint8_t> bits(static_cast<size_t>(n) * D / 8), sbits(D / 8);
    cuda::DeviceArray<float> scales(n), cscales(n);
    cuda::DeviceArray<uint16_t> half(d);
    cuda::DeviceArray<float> qs(static_cast<size_t>(n) * d);  // LoCo: n workers' Q(x_i)
    fill(b.get(), d, 0, -1.0f, 2.0f);
    fill(g.get(), d, 1, -1.0f, 2.0f);
    fill(x.get(), d, 2, -1.0f, 2.0f);
    fill(m.get(), d, 3, -0.1f, 0.2f);
    fill(v.get(), d, 4, 0.0f, 0.01f);
    fill(den.get(), d, 5, 0.01f, 0.1f);
    fill(qs.get(), static_cast<size_t>(n) * d, 6, -1.0f, 2.0f);
    e.zero();
    s.zero();
    u.zero();
    const AdamCoeffs c = make_adam_coeffs(1e-3, 0.9, 0.999, 1e-8, 0.0, false, 1);
    const ZeroOneLocalCoeffs lc{1e-3f, 0.9f, 0.1f, 0.0f};
    const double df = static_cast<double>(d), Df = static_cast<double>(D);
    auto row = [&](const char* name, double bytes, double secs) {
      std::printf("%-18s %10zu %12.1f %10.0f %7.1f%% %7.1f%%\n", name, d, secs * 1e6,
                  bytes / secs / 1e9, 100.0 * bytes / secs / copy_bw, 100.0 * bytes / secs / peak);
    };
    // The worker stage of every worker compresses its own b; timing one is
    // representative (the kernels are the same for each).
    // Every numbered variant (kernels.hpp), so the default can be chosen on a
    // GPU; the path figure below uses the default's time.
    double t_worker = 0.0;
    for (int variant = 1; variant <= cuda::kWorkerCompressVariants; ++variant) {
      const double t = timer.median([&] {
        cuda::onebit_worker_compress_variant(variant, b.get(), d, e.get(), D, bits.get(),
                                             scales.get());
      });
      const std::string name = "worker_compress_v" + std::to_string(variant) +
                               (variant == cuda::kWorkerCompressDefault ? "*" : "");
      row(name.c_str(), 4 * df + 8 * Df + Df / 8, t);
      if (variant == cuda::kWorkerCompressDefault) t_worker = t;
    }
    for (int i = 1; i < n; ++i)  // the other workers' bits: copies of worker 0's
      check(cudaMemcpy(bits.get() + i * D / 8, bits.get(), D / 8, cudaMemcpyDeviceToDevice),
            "copy");
    check(cudaMemcpy(scales.get() + 1, scales.get(), 4, cudaMemcpyDeviceToDevice), "copy");
    check(cudaMemcpy(scales.get() + 2, scales.get(), 8, cudaMemcpyDeviceToDevice), "copy");
    const double t_server = timer.median([&] {
      for (int r = 0; r < n; ++r)
        cuda::onebit_server_reduce(bits.get() + r * chunk / 8, D / 8, scales.get(), n, chunk,
                                   s.get() + r * chunk, nullptr, sbits.get() + r * chunk / 8,
                                   cscales.get() + r);
    });
    row("server_stage", n * Df / 8 + 8 * Df + Df / 8, t_server);
    const double t_decode =
        timer.median([&] { cuda::onebit_decode(sbits.get(), cscales.get(), n, D, d, out.get()); });
    row("decode", Df / 8 + 4 * df, t_decode);
    row("adam", 28 * df,
        timer.median([&] { cuda::adam_update(x.get(), m.get(), v.get(), g.get(), d, c); }));
    row("onebit_momentum", 12 * df,
        timer.median([&] { cuda::onebit_adam_momentum(m.get(), g.get(), d, out.get(), c); }));
    row("onebit_update", 20 * df,
        timer.median([&] { cuda::onebit_adam_update(x.get(), m.get(), v.get(), nullptr, d, c); }));
    row("zero_one_local", 32 * df, timer.median([&] {
      cuda::zero_one_local_step(x.get(), m.get(), u.get(), g.get(), den.get(), d, lc);
    }));
    row("zero_one_sync", 20 * df, timer.median([&] {
      cuda::zero_one_sync(m.get(), x.get(), out.get(), den.get(), d, 1e-3);
    }));
    row("binarize_pack", 4 * df + df / 8, timer.median([&] {
      cuda::binarize_pack(g.get(), d, RngStream(7, Purpose::kCompress, 0, 1), bits.get());
    }));
    const QuantizeSpec q4{4, 128, false, false};
    row("quantize_groups", 8 * df, timer.median([&] {
      cuda::quantize_groups(g.get(), d, out.get(), q4, RngStream(7, Purpose::kCompress), 0);
    }));
    row("ema_error_update", 16 * df,
        timer.median([&] { cuda::ema_error_update(m.get(), g.get(), out.get(), d, 0.8f); }));
    row("dequantize_reduce", 4.0 * n * df + 4 * df,
        timer.median([&] { cuda::dequantize_reduce(qs.get(), d, n, d, out.get()); }));
    const double t_half = timer.median([&] { cuda::fp32_to_fp16(b.get(), d, half.get()); });
    row("fp32_to_fp16", 6 * df, t_half);
    // One worker's share of the 1-bit path (its compression, its server
    // chunk, the decode) against converting the same tensor to fp16.
    const double t_path = t_worker + t_server / n + t_decode;
    std::printf(
        "%-18s %10zu %12.1f   1-bit path (worker + 1/n server + decode) = %.2f x fp16 copy\n",
        "onebit_path", d, t_path * 1e6, t_path / t_half);
  }
  return 0;
}
