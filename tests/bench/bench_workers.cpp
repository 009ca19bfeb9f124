// Benchmark (run on demand, not a test): what many workers cost. One
// configuration per process, so that the peak resident memory is this
// configuration's own: Adam, 1-bit Adam, 1-bit LAMB or 0/1 Adam on the
// quadratic with N workers and d = 2^K parameters; prints the memory check's
// estimate, the optimizer's own state (Optimizer::planned_state_bytes), the peak
// resident memory against that state and the machine's, and the median step
// time (for Adam and 1-bit Adam against the time the bytes necessarily
// touched take at the STREAM triad bandwidth measured in the same run, after
// the steps, so its arrays do not count in the peak). The parameters reached
// are checked, "#wrong" (bench_util.hpp: Check), against the same steps with
// half the threads (--check no skips it, saying so).
// tests/bench/many_workers.sh runs a grid (default: N = 1024 and 4096, d = 2^20
// and 2^22, Adam and 1-bit Adam; BENCH_* override it, docs/building.md).
//
//   ./build/bench_workers [--workers N] [--log2-dim K]
//                         [--optimizer adam|onebit_adam|onebit_lamb|zero_one_adam]
//                         [--pad reference|8n] [--repeats R] [--noise S]
//
// The 1-bit family's timed steps are compressed ones (freeze_step /
// var_freeze_step 2; 0/1 Adam then syncs every step, local_interval 1). The
// experiment's steps are the steps run (2 + R), so 0/1 Adam knows that no
// local step falls in the run and holds shared rows (optimizers/zero_one_adam.hpp).
// --pad: the 1-bit allreduce's padding multiple, the reference's n·lcm(n, 8)
// (= N² for N a multiple of 8: at N = 4096 that pads d = 2^20 to 2^24, and the
// error rows are then 16·d each) or 8·N (pad_multiple, the least that makes
// every chunk whole bytes: d = 2^20 is then not padded at all for N <= 2^17).
//
// Bytes necessarily touched per step (4-byte floats, d parameters, N workers),
// as bench_step counts them:
//   gradients       N · (read x, h, x* + write g_i)                  = N · 16 d
//   Adam            allreduce: read N gradients + write the mean      = (4N + 4) d
//                   update: read ḡ, m, v, x + write m, v, x           = 28 d
//   1-bit Adam      worker stage: read g_i, m, e_i + write e_i        = N · 16 d
//   (compression)   (the signs, N·d/8 bytes, the server stage's d-sized
//                   rows and the update are not counted: a lower bound)
// Every optimizer here streams each gradient as it is made (into the mean, or
// into the 1-bit family's worker stage: Optimizer::take_gradient), so the
// gradient rows are never held; what stays per worker is the algorithm's own
// state (1-bit Adam, 1-bit LAMB and 0/1 Adam without local steps: the error
// row; 0/1 Adam with local steps: x_i, m_i, u_i too). The memory check
// refuses what cannot fit: the benchmark then prints the refusal.
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
#include "tests/bench/bench_sim.hpp"
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
  std::string pad = "reference";
  bool check = true;
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
    } else if (!std::strcmp(argv[i], "--pad")) {
      a.pad = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--check") &&
               (!std::strcmp(argv[i + 1], "yes") || !std::strcmp(argv[i + 1], "no"))) {
      a.check = !std::strcmp(argv[i + 1], "yes");
    } else {
      std::fprintf(stderr,
                   "usage: bench_workers [--workers N] [--log2-dim K] "
                   "[--optimizer adam|onebit_adam|onebit_lamb|zero_one_adam] [--pad reference|8n] "
                   "[--repeats R] [--noise S] [--check yes|no]\n");
      std::exit(2);
    }
  }
  if (a.optimizer != "adam" && a.optimizer != "onebit_adam" && a.optimizer != "onebit_lamb" &&
      a.optimizer != "zero_one_adam") {
    std::fprintf(stderr,
                 "bench_workers: --optimizer must be adam, onebit_adam, onebit_lamb or "
                 "zero_one_adam\n");
    std::exit(2);
  }
  if (a.pad != "reference" && a.pad != "8n") {
    std::fprintf(stderr, "bench_workers: --pad must be reference or 8n\n");
    std::exit(2);
  }
  return a;
}

std::string experiment_text(const Args& a) {
  // The 1-bit family: a warm-up of 2 steps, so every timed step compresses.
  const std::string pad =
      a.pad == "8n" ? R"(, "pad_multiple": )" + std::to_string(8 * int64_t{a.workers}) : "";
  std::string optimizer = R"({"name": "adam", "lr": 0.001})";
  if (a.optimizer == "onebit_adam" || a.optimizer == "onebit_lamb") {
    optimizer = R"({"name": ")" + a.optimizer + R"(", "lr": 0.001, "freeze_step": 2)" + pad + "}";
  } else if (a.optimizer == "zero_one_adam") {
    optimizer = R"({"name": "zero_one_adam", "lr": 0.001, "var_freeze_step": 2)" + pad + "}";
  }
  return std::string(R"({"name": "bench", "steps": )") + std::to_string(2 + a.repeats) +
         R"(, "grad_norm_every": 0,)" +
         R"("problem": {"name": "quadratic", "condition_number": 10, "dim": )" +
         std::to_string(int64_t{1} << a.log2_dim) + R"(, "noise": )" + std::to_string(a.noise) +
         R"(}, "cluster": {"workers": )" + std::to_string(a.workers) +
         R"(}, "optimizer": )" + optimizer + "}";
}

double gb(double bytes) { return bytes / 1e9; }

// The parameters the timed steps reached, against the same steps with half
// the threads (one on a 2-core machine): the streamed folds' per-thread
// blocks are where a thread-count dependence would show. Half, not one: at
// thousands of workers one thread would take the grid hours. Run after the
// peak was taken and the timed simulation freed.
void check_parameters(const Args& a, const std::vector<float>& timed) {
  const int threads = std::max(1, omp_get_max_threads() / 2);
  char against[80];
  std::snprintf(against, sizeof against, "the same steps on %d thread%s", threads,
                threads == 1 ? "" : "s");
  if (!a.check) {
    std::printf("  check parameters: not run (--check no)\n");
    return;
  }
  Check check;
  check.compare(timed, params_after_steps(experiment_text(a), 2 + a.repeats, threads));
  print_check("parameters", check, against);
}

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
  const double state = static_cast<double>(sim->cluster().optimizer_bytes());
  std::printf(
      "memory check's estimate: %.2f GB, the optimizer's state %.2f GB of it (gradients: %s)   "
      "set-up %.1f s\n",
      gb(static_cast<double>(sim->cluster().memory_estimate())), gb(state),
      sim->cluster().streams_mean() ? "streamed" : "n x d rows", setup_s);

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
  const std::span<const float> x = sim->cluster().params();
  const std::vector<float> timed(x.begin(), x.end());
  sim.reset();
  check_parameters(a, timed);

  std::printf("step: median %.3f s (min %.3f, max %.3f) of %d\n", step_s,
              *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()),
              a.repeats);
  // The peak against the optimizer's own state: what the simulator adds (the
  // parameters, the streamed mean's blocks, the data) on top of the algorithm.
  const double of_state = state > 0.0 ? peak / state : 0.0;
  if (a.optimizer != "adam" && a.optimizer != "onebit_adam") {
    std::printf(
        "result: %s  step_s %.3f  peak_resident_GB %.2f  state_GB %.2f  of_state %.2f  "
        "machine_GB %.1f  of_machine %.0f%%\n",
        wrong_so_far() == 0 ? "ok" : "WRONG", step_s, gb(peak), gb(state), of_state, gb(machine),
        100.0 * peak / machine);
    return exit_status();
  }
  const double bytes = a.optimizer == "adam" ? (16.0 * n + (4.0 * n + 4.0) + 28.0) * d
                                             : (16.0 * n + 16.0 * n) * d;
  const double triad = triad_gbps(size_t{1} << 26, 3);
  const double floor_s = bytes / (triad * 1e9);
  std::printf("bytes necessarily touched: %.2f GB a step; at the triad's %.2f GB/s: %.3f s\n",
              gb(bytes), triad, floor_s);
  std::printf(
      "result: %s  step_s %.3f  floor_s %.3f  of_floor %.2f  peak_resident_GB %.2f  state_GB "
      "%.2f  of_state %.2f  machine_GB %.1f  of_machine %.0f%%\n",
      wrong_so_far() == 0 ? "ok" : "WRONG", step_s, floor_s, step_s / floor_s, gb(peak), gb(state),
      of_state, gb(machine),
      100.0 * peak / machine);
  return exit_status();
}
