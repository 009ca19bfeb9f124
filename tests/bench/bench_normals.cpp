// Benchmark (run on demand, not a test): Gaussian gradient noise, the cost that
// dominates noisy runs. Normals/s of fill_normal on every instruction set this
// CPU supports (sim/core/isa.hpp; all give the same bits), next to what bounds
// it, measured in the same run:
//   - the integer-only Philox stream (rounds and stores, no transform): the
//     floor for any transform on these counters;
//   - the libm transform fill_normal used before (std::log/std::cos/std::sin per
//     pair, scalar), to quote the speed-up;
//   - a STREAM triad, as 4 bytes written per normal: GB/s of the write stream.
// Each thread fills its own slice of a 2^24-float buffer (64 MiB), as the
// workers of a step do.
//
//   OMP_NUM_THREADS=2 ./build/bench_normals [--log2-n K] [--repeats R]
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "sim/core/rng.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

namespace {

// The transform fill_normal used before the vectorised one (libm, scalar).
void libm_normals(const RngStream& rng, std::span<float> out, float scale, uint64_t first) {
  constexpr float kTwoPi = 6.28318530717958647692f;
  for (size_t k = 0; k < out.size(); k += 4) {
    const PhiloxBlock b = rng.block((first + k) / 4);
    const float r0 = std::sqrt(-2.0f * std::log(u32_to_unit_open0(b[0])));
    const float t0 = kTwoPi * u32_to_unit_open0(b[1]);
    const float r1 = std::sqrt(-2.0f * std::log(u32_to_unit_open0(b[2])));
    const float t1 = kTwoPi * u32_to_unit_open0(b[3]);
    const float z[4] = {r0 * std::cos(t0), r0 * std::sin(t0), r1 * std::cos(t1), r1 * std::sin(t1)};
    for (size_t l = 0; l < 4 && k + l < out.size(); ++l) out[k + l] = scale * z[l];
  }
}

// Philox rounds only: the four words of each block stored as they are.
void philox_words(const RngStream& rng, std::span<float> out, float, uint64_t first) {
  uint32_t* w = reinterpret_cast<uint32_t*>(out.data());
  for (size_t k = 0; k + 4 <= out.size(); k += 4) {
    const PhiloxBlock b = rng.block((first + k) / 4);
    std::memcpy(w + k, b.data(), sizeof b);
  }
}

using Fill = std::function<void(const RngStream&, std::span<float>, float, uint64_t)>;

// Median seconds to fill the buffer, each thread its own contiguous slice.
double time_fill(const Fill& fill, std::vector<float>& buf, int repeats) {
  std::vector<double> t;
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const size_t threads = omp_get_num_threads(), me = omp_get_thread_num();
      const size_t per = (buf.size() / threads) & ~size_t{3};
      const size_t begin = me * per, end = me + 1 == threads ? buf.size() : begin + per;
      const RngStream rng(1, Purpose::kGradNoise, static_cast<uint32_t>(me), 3);
      fill(rng, std::span<float>(buf).subspan(begin, end - begin), 0.1f, begin);
    }
    if (r > 0) t.push_back(seconds_since(t0));  // the first touches the pages
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  int log2_n = 24, repeats = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--log2-n"))
      log2_n = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_normals [--log2-n K] [--repeats R]\n");
      return 2;
    }
  }
  std::vector<float> buf(size_t{1} << log2_n);
  const double n = static_cast<double>(buf.size());
  std::printf("bench_normals: 2^%d normals per fill, %d threads, median of %d\n", log2_n,
              omp_get_max_threads(), repeats);
  const double triad = triad_gbps(size_t{1} << 26, repeats);
  const double philox_s = time_fill(philox_words, buf, repeats);
  const double philox_rate = n / philox_s;
  std::printf("STREAM triad: %.2f GB/s  (= %.0f M floats/s written at 4 B each)\n", triad,
              triad * 1e9 / 12.0 / 1e6);
  std::printf("%-34s %10s %12s %10s %10s\n", "case", "median_ms", "M normals/s", "of_philox",
              "vs_libm");
  const double libm_s = time_fill(libm_normals, buf, repeats);
  auto row = [&](const char* label, double s) {
    std::printf("%-34s %10.2f %12.1f %9.0f%% %9.2fx\n", label, s * 1e3, n / s / 1e6,
                100.0 * (n / s) / philox_rate, libm_s / s);
  };
  row("philox words only (floor)", philox_s);
  row("libm Box-Muller (previous)", libm_s);
  // Every variant's numbers are checked against the SSE2 variant's (the
  // same slices, streams and offsets): the same bits, by construction.
  std::vector<float> sse2;
  for (Isa isa : supported_isas()) {
    const std::string label = std::string("fill_normal ") + isa_name(isa);
    row(label.c_str(), time_fill([isa](const RngStream& r, std::span<float> o, float s,
                                       uint64_t f) { fill_normal_isa(isa, r, o, s, f); },
                                 buf, repeats));
    if (isa == Isa::kSse2) {
      sse2 = buf;
      continue;
    }
    Check check;
    check.compare(buf, sse2);
    print_check("normals drawn", check, "fill_normal sse2");
  }
  std::printf(
      "(of_philox: normals/s over the Philox-only words/s; all fill_normal rows give "
      "the same bits)\n");
  return exit_status();
}
