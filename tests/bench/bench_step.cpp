// Benchmark (run on demand, not a test): time per simulated step of Adam with
// an exact fp32 allreduce on the quadratic, N = 16 workers, d = 2^22, and the
// effective memory bandwidth it reaches, next to a STREAM-style triad
// measured in the same run. Target: >= 50 % of the triad bandwidth.
// Then 1-bit Adam's compression-stage step (freeze_step = 2: every timed step
// compressed) on the same problem, and its ratio to the Adam step measured in
// the same run. Target: at most 1.5x. BITLAB_ISA=sse2|avx2|avx512
// picks the hot loops' variant (sim/core/isa.hpp).
// Each case checks the parameters its timed steps reached against the same
// steps on one thread and prints "#wrong" (bench_util.hpp: Check).
//
//   ./build/bench_step [--workers N] [--log2-dim K] [--repeats R]
//
// Bytes necessarily touched per step (4-byte floats, d parameters, N workers):
//   gradients   N · (read x, h, x* + write g_i)      = N · 16 d
//   allreduce   read N gradients + write the mean     = (4N + 4) d
//   Adam        read ḡ, m, v, x + write m, v, x       = 28 d
// Every emulated worker reads the parameters and its problem data as a real
// worker would; nothing else (no metrics pass: grad_norm_every = 0 for the
// headline figure) is counted. Writes are counted once, as STREAM does.
//
// Floors, each from rates measured in the same run:
//   noise-free Adam   bytes / triad bandwidth;
//   noisy Adam        that + N·d normals at the rate fill_normal reaches into a
//                     cache-resident buffer (the transform alone, no memory
//                     traffic: a floor that assumes no overlap of the two);
//   1-bit Adam        its bytes / triad: gradients N·16d as above; worker stage
//                     read m once (4d: the stage runs block by block, every
//                     worker on a block while m's block is in cache) + N·(read
//                     g_i + read and write e_i + write d/8 signs) = 4d +
//                     N·(12d + d/8); server read N·d/8 signs + read and write
//                     its error 8d + write d/8; decode read d/8 + write 4d;
//                     update read m, v, x + write m, x = 20d. Its floor over
//                     Adam's is the bound on the 1.5 target the bytes allow.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim/core/rng.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/bench/bench_sim.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

namespace {

struct StepTiming {
  double median_s, min_s, max_s;
  Check check;  // the parameters reached, against the same steps on one thread
};

std::string experiment_text(int workers, int log2_dim, int64_t grad_norm_every,
                            const std::string& optimizer, double noise) {
  return
      std::string(R"({"name": "bench", "steps": 1000000,
      "grad_norm_every": )") +
      std::to_string(grad_norm_every) + R"(, "problem": {"name": "quadratic", "dim": )" +
      std::to_string(int64_t{1} << log2_dim) + R"(, "noise": )" + std::to_string(noise) +
      R"(, "condition_number": 10},
      "cluster": {"workers": )" +
      std::to_string(workers) + R"(}, "optimizer": )" + optimizer + "}";
}

// Times `repeats` steps after two warm-up steps, then checks the parameters
// they reached against the same steps on one thread.
StepTiming time_steps(int workers, int log2_dim, int64_t grad_norm_every, int repeats,
                      const std::string& optimizer, double noise) {
  const std::string text = experiment_text(workers, log2_dim, grad_norm_every, optimizer, noise);
  Simulation sim(resolve_experiment(Json::parse(text), "bench"));
  for (int w = 0; w < 2; ++w) sim.step();  // first touches, page faults
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    sim.step();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Check check;
  check.compare(sim.cluster().params(), params_after_steps(text, 2 + repeats, 1));
  return {median(t), *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()),
          check};
}

// Seconds to draw `count` normals with fill_normal into one cache-resident
// buffer per thread (the transform alone), median of `repeats`.
double normals_alone_s(double count, int repeats) {
  constexpr size_t kChunk = size_t{1} << 14;  // 64 KiB: stays in L2
  const auto chunks = static_cast<int64_t>(count / kChunk);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      std::vector<float> buf(kChunk);
      const RngStream rng(7, Purpose::kGradNoise, static_cast<uint32_t>(omp_get_thread_num()), 1);
#pragma omp for schedule(static)
      for (int64_t c = 0; c < chunks; ++c) {
        fill_normal(rng, buf, 0.1f, static_cast<uint64_t>(c) * kChunk);
      }
    }
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(t);
}

std::string adam_json(const char* wire) {
  return std::string(R"({"name": "adam", "lr": 0.001, "wire": ")") + wire + R"("})";
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 16, log2_dim = 22, repeats = 11;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workers"))
      workers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--log2-dim"))
      log2_dim = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_step [--workers N] [--log2-dim K] [--repeats R]\n");
      return 2;
    }
  }
  const double d = static_cast<double>(int64_t{1} << log2_dim);
  const double n = workers;
  const double bytes = (16.0 * n + (4.0 * n + 4.0) + 28.0) * d;

  std::printf("bench_step: Adam + exact allreduce on the quadratic, N = %d workers, d = 2^%d\n",
              workers, log2_dim);
  std::printf("threads: %d   bytes necessarily touched per step: %.1f MB (%.0f d)\n",
              omp_get_max_threads(), bytes / 1e6, bytes / d);
  const double triad = triad_gbps(size_t{1} << 26, repeats);
  std::printf("STREAM triad (3 x 256 MiB arrays, median of %d): %.2f GB/s\n", repeats, triad);

  std::printf("%-34s %10s %10s %10s %10s %9s\n", "case", "median_ms", "min_ms", "max_ms", "GB/s",
              "of_triad");
  struct Case {
    const char* label;
    int64_t grad_norm_every;
    const char* wire;
    double noise;
  };
  double clean_s = 0.0, noisy_s = 0.0;
  for (const Case c : {Case{"adam fp32 (headline)", 0, "fp32", 0.0},
                       Case{"adam fp32 + grad_norm metric", 1, "fp32", 0.0},
                       Case{"adam fp16 wire", 0, "fp16", 0.0},
                       Case{"adam fp32, gradient noise 0.1", 0, "fp32", 0.1}}) {
    const StepTiming t =
        time_steps(workers, log2_dim, c.grad_norm_every, repeats, adam_json(c.wire), c.noise);
    const double gbps = bytes / t.median_s / 1e9;
    std::printf("%-34s %10.2f %10.2f %10.2f %10.2f %8.0f%%\n", c.label, t.median_s * 1e3,
                t.min_s * 1e3, t.max_s * 1e3, gbps, 100.0 * gbps / triad);
    print_check("parameters", t.check, "the same steps on one thread");
    if (c.noise > 0.0) noisy_s = t.median_s;
    if (c.grad_norm_every == 0 && c.noise == 0.0 && !std::strcmp(c.wire, "fp32"))
      clean_s = t.median_s;
  }
  std::printf(
      "noise costs %.2f ms a step: N·d = %.0f M normals at %.0f M normals/s (instruction set: "
      "%s; bench_normals measures the transform alone)\n",
      (noisy_s - clean_s) * 1e3, n * d / 1e6, n * d / (noisy_s - clean_s) / 1e6,
      isa_name(active_isa()));
  const double bytes_floor_s = bytes / (triad * 1e9);
  const double normals_s = normals_alone_s(n * d, repeats);
  std::printf(
      "floors: noise-free Adam %.2f ms (bytes at the triad): step/floor %.2f; noisy Adam %.2f ms "
      "(+ N·d normals in cache, %.0f M/s): step/floor %.2f\n",
      bytes_floor_s * 1e3, clean_s / bytes_floor_s, (bytes_floor_s + normals_s) * 1e3,
      n * d / normals_s / 1e6, noisy_s / (bytes_floor_s + normals_s));
  std::printf(
      "(GB/s = the bytes above / median step time; the grad_norm row reads the N "
      "gradients once more and the fp16 row rounds on the fly, neither counted)\n");

  // 1-bit Adam, compression stage: the same gradients, then the fused worker
  // stage (momentum, error, norm; signs and error), the server stage, the
  // decode and the update (docs/algorithms.md §1). Target: <= 1.5x Adam.
  constexpr double kOneBitLimit = 1.5;
  const StepTiming ob =
      time_steps(workers, log2_dim, 0, repeats,
                 R"({"name": "onebit_adam", "lr": 0.001, "freeze_step": 2})", 0.0);
  std::printf("%-34s %10.2f %10.2f %10.2f\n", "onebit_adam compression stage", ob.median_s * 1e3,
              ob.min_s * 1e3, ob.max_s * 1e3);
  print_check("parameters", ob.check, "the same steps on one thread");
  const double onebit_bytes =
      n * 16.0 * d + (4.0 * d + n * (12.0 * d + d / 8)) + (n * d / 8 + 8.0 * d + d / 8) +
      (d / 8 + 4.0 * d) + 20.0 * d;
  const double onebit_floor_s = onebit_bytes / (triad * 1e9);
  std::printf(
      "onebit_adam floor %.2f ms (%.1f MB at the triad): step/floor %.2f; floors' ratio to "
      "Adam's %.2f\n",
      onebit_floor_s * 1e3, onebit_bytes / 1e6, ob.median_s / onebit_floor_s,
      onebit_bytes / bytes);
  const double ratio = ob.median_s / clean_s;
  std::printf("onebit_adam / adam step (medians): %.2f (limit %.1f: %s), instruction set %s\n",
              ratio, kOneBitLimit, ratio <= kOneBitLimit ? "met" : "NOT met",
              isa_name(active_isa()));
  return exit_status();
}
