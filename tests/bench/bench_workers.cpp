// Benchmark (run on demand, not a test): what many workers cost. One
// configuration per process, so that the peak resident memory is this
// configuration's own: Adam or 1-bit Adam on the quadratic with N workers and
// d = 2^K parameters; prints the memory check's estimate, the peak resident
// memory against the machine's, and the median step time against the time
// the bytes necessarily touched take at the STREAM triad bandwidth measured in
// the same run (after the steps, so its arrays do not count in the peak).
// tests/bench/many_workers.sh runs the grid the issue asks for (N = 1024 and
// 4096, d = 2^20 and 2^22, both optimizers).
//
//   ./build/bench_workers [--workers N] [--log2-dim K] [--optimizer adam|onebit_adam]
//                         [--repeats R] [--noise S]
//
// Bytes necessarily touched per step (4-byte floats, d parameters, N workers),
// as bench_step counts them:
//   gradients       N · (read x, h, x* + write g_i)                  = N · 16 d
//   Adam            allreduce: read N gradients + write the mean      = (4N + 4) d
//                   update: read ḡ, m, v, x + write m, v, x           = 28 d
//   1-bit Adam      worker stage: read g_i, m_i, e_i + write m_i, e_i = N · 20 d
//   (compression)   (the signs, N·d/8 bytes, the server stage's d-sized
//                   rows and the update are not counted: a lower bound)
// Adam streams each gradient into the mean (Optimizer::gradient_mean_wire),
// so it holds a few rows per thread; 1-bit Adam keeps per-worker momenta and
// errors (N · 2d floats) and the gradient rows, which the memory check refuses
// when they cannot fit: the benchmark then prints the refusal.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim/core/memory.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

namespace {

struct Args {
  int workers = 1024;
  int log2_dim = 20;
  std::string optimizer = "adam";
  int repeats = 3;
  double noise = 0.0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workers")) {
      a.workers = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--log2-dim")) {
      a.log2_dim = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--optimizer")) {
      a.optimizer = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--repeats")) {
      a.repeats = std::atoi(argv[i + 1]);
    } else if (!std::strcmp(argv[i], "--noise")) {
      a.noise = std::atof(argv[i + 1]);
    } else {
      std::fprintf(stderr,
                   "usage: bench_workers [--workers N] [--log2-dim K] "
                   "[--optimizer adam|onebit_adam] [--repeats R] [--noise S]\n");
      std::exit(2);
    }
  }
  if (a.optimizer != "adam" && a.optimizer != "onebit_adam") {
    std::fprintf(stderr, "bench_workers: --optimizer must be adam or onebit_adam\n");
    std::exit(2);
  }
  return a;
}

std::string experiment_text(const Args& a) {
  // 1-bit Adam: freeze_step 2, so every timed step is a compression step.
  const std::string optimizer =
      a.optimizer == "adam" ? R"({"name": "adam", "lr": 0.001})"
                            : R"({"name": "onebit_adam", "lr": 0.001, "freeze_step": 2})";
  return std::string(R"({"name": "bench", "steps": 1000000, "grad_norm_every": 0,)") +
         R"("problem": {"name": "quadratic", "condition_number": 10, "dim": )" +
         std::to_string(int64_t{1} << a.log2_dim) + R"(, "noise": )" + std::to_string(a.noise) +
         R"(}, "cluster": {"workers": )" + std::to_string(a.workers) +
         R"(}, "optimizer": )" + optimizer + "}";
}

double gb(double bytes) { return bytes / 1e9; }

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const double n = a.workers;
  const double d = static_cast<double>(int64_t{1} << a.log2_dim);
  std::printf("bench_workers: %s on the quadratic, N = %d workers, d = 2^%d, noise %g, %d threads\n",
              a.optimizer.c_str(), a.workers, a.log2_dim, a.noise, omp_get_max_threads());
  const double machine = static_cast<double>(machine_memory_bytes());

  const auto t_setup = Clock::now();
  std::unique_ptr<Simulation> sim;
  try {
    sim = std::make_unique<Simulation>(resolve_experiment(Json::parse(experiment_text(a)), "bench"));
  } catch (const ConfigError& e) {
    std::printf("refused before allocating: %s\n", e.what());
    std::printf("result: refused  peak_resident_GB %.2f  machine_GB %.1f\n",
                gb(static_cast<double>(peak_resident_bytes())), gb(machine));
    return 0;
  }
  const double setup_s = seconds_since(t_setup);
  std::printf("memory check's estimate: %.2f GB (gradients: %s)   set-up %.1f s\n",
              gb(static_cast<double>(sim->cluster().memory_lower_bound())),
              sim->cluster().streams_mean() ? "streamed into their mean" : "n x d rows", setup_s);

  // Warm-up: page faults, and 1-bit Adam's warm-up steps (freeze_step 2).
  for (int w = 0; w < 2; ++w) sim->step();
  std::vector<double> t;
  for (int r = 0; r < a.repeats; ++r) {
    const auto t0 = Clock::now();
    sim->step();
    t.push_back(seconds_since(t0));
  }
  const double peak = static_cast<double>(peak_resident_bytes());
  const double step_s = median(t);
  sim.reset();

  const double bytes = a.optimizer == "adam" ? (16.0 * n + (4.0 * n + 4.0) + 28.0) * d
                                             : (16.0 * n + 20.0 * n) * d;
  const double triad = triad_gbps(size_t{1} << 26, 3);
  const double floor_s = bytes / (triad * 1e9);
  std::printf("step: median %.3f s (min %.3f, max %.3f) of %d\n", step_s,
              *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()),
              a.repeats);
  std::printf("bytes necessarily touched: %.2f GB a step; at the triad's %.2f GB/s: %.3f s\n",
              gb(bytes), triad, floor_s);
  std::printf(
      "result: ok  step_s %.3f  floor_s %.3f  of_floor %.2f  peak_resident_GB %.2f  machine_GB "
      "%.1f  of_machine %.0f%%\n",
      step_s, floor_s, step_s / floor_s, gb(peak), gb(machine), 100.0 * peak / machine);
  return 0;
}
