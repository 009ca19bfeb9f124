// Benchmark (run on demand, not a test): the two-stage compressed allreduce
// (docs/algorithms.md §1) for n = 16 workers and d = 2^22: time per call, effective
// memory bandwidth against a STREAM triad measured in the same run (target,
// target: >= 50 %), and the speed of sign packing in GB/s of input.
//
//   ./build/bench_onebit [--workers N] [--log2-dim K] [--repeats R]
//
// Bytes necessarily touched per call (D = padded d, 4-byte floats):
//   worker side, each of n:  read b (4d), read + write e (8D), write signs (D/8)
//   server side, in all:     read n·D/8 sign bytes, read + write s (8D), write D/8
//   decode:                  read D/8, write out (4d)
// The implementation reads e a second time (the scale needs ‖u‖ before e can
// be updated); that extra pass is not counted.
// Checks, printed as "#wrong" (bench_util.hpp: Check): the last call's output
// against the same calls of a fresh allreduce on one thread; the packed signs
// against a plain loop of the rule pack_signs states.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/compress/compressor.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

int main(int argc, char** argv) {
  int n = 16, log2_dim = 22, repeats = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workers"))
      n = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--log2-dim"))
      log2_dim = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_onebit [--workers N] [--log2-dim K] [--repeats R]\n");
      return 2;
    }
  }
  const size_t d = size_t{1} << log2_dim;
  OneBitAllreduce ob(n, d);
  const double D = static_cast<double>(ob.padded_dim());
  const double bytes =
      n * (4.0 * d + 8.0 * D + D / 8) + (n * D / 8 + 8.0 * D + D / 8) + (D / 8 + 4.0 * d);

  std::printf("bench_onebit: two-stage 1-bit compressed allreduce, n = %d, d = 2^%d (D = %.0f)\n",
              n, log2_dim, D);
  std::printf("threads: %d   bytes necessarily touched per call: %.1f MB\n", omp_get_max_threads(),
              bytes / 1e6);
  const double triad = triad_gbps(size_t{1} << 26, repeats);
  std::printf("STREAM triad (3 x 256 MiB arrays, median of %d): %.2f GB/s\n", repeats, triad);

  const size_t stride = (d + 15) / 16 * 16;
  std::vector<float> in(stride * n), out(d);
  WorkerBuffers view{in.data(), stride, d, n};
  for (int i = 0; i < n; ++i) fill_normal(RngStream(1, Purpose::kTest, i), view[i], 1.0f);
  Communicator comm(n);
  for (int w = 0; w < 2; ++w) ob.run(comm, view, out);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    ob.run(comm, view, out);
    t.push_back(seconds_since(t0));
  }
  const double med = median(t);
  const double gbps = bytes / med / 1e9;
  std::printf(
      "compressed allreduce: median %.2f ms (min %.2f, max %.2f) per call, %.2f GB/s = "
      "%.0f%% of triad\n",
      med * 1e3, *std::min_element(t.begin(), t.end()) * 1e3,
      *std::max_element(t.begin(), t.end()) * 1e3, gbps, 100.0 * gbps / triad);
  {
    // The error feedback carries state from call to call: the reference
    // makes the same 2 + repeats calls.
    const std::vector<float> want = on_one_thread([&] {
      OneBitAllreduce ref(n, d);
      std::vector<float> ref_out(d);
      for (int c = 0; c < 2 + repeats; ++c) ref.run(comm, view, ref_out);
      return ref_out;
    });
    Check check;
    check.compare(out, want);
    print_check("output of the last call", check, "the same calls on one thread");
  }
  std::printf(
      "  wire: %lld bytes sent per worker per call (fp16 ring allreduce: %.0f, ratio "
      "1/%.1f)\n",
      static_cast<long long>(ob.sent_bytes_per_call()), 2.0 * (n - 1) / n * 2.0 * d,
      2.0 * (n - 1) / n * 2.0 * d / ob.sent_bytes_per_call());

  // Sign packing alone, one thread per slice of the buffer (as the worker
  // side uses it), GB/s of float input.
  std::vector<uint8_t> bits(in.size() / 8);
  std::vector<double> tp;
  const int64_t total = static_cast<int64_t>(in.size());
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
      const int64_t per = (total / 8 / nt) * 8;
      const int64_t lo = tid * per, hi = tid == nt - 1 ? total : lo + per;
      pack_signs({in.data() + lo, static_cast<size_t>(hi - lo)},
                 {bits.data() + lo / 8, static_cast<size_t>((hi - lo + 7) / 8)});
    }
    if (r > 0) tp.push_back(seconds_since(t0));
  }
  std::printf("sign packing: %.2f GB/s of fp32 input (median over %d passes of %.0f MB)\n",
              4.0 * total / median(tp) / 1e9, repeats, 4.0 * total / 1e6);
  // bits[k / 8] bit (7 − k % 8) = (x[k] >= 0), the rule compressor.hpp states.
  std::vector<uint8_t> want(bits.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    if (in[static_cast<size_t>(k)] >= 0.0f) want[k / 8] |= static_cast<uint8_t>(0x80u >> (k % 8));
  }
  Check check;
  check.compare_bytes(bits, want);
  print_check("packed sign bytes", check, "a plain loop of pack_signs' rule");
  return exit_status();
}
