// Benchmark (run on demand, not a test): the gradient computation of the real
// problems — every emulated worker's forward + backward on its batch, OpenMP
// over groups of workers whose samples go through one pass
// (Problem::loss_grad_workers, sim/kernels/matmul.hpp's products) — timed as
// whole simulated steps (the gradients and their mean, as Adam's step computes
// them: Cluster::compute_gradient_mean), reported as simulated worker-samples per
// second and as the fraction of the machine's measured fp32 peak
// (bench_util.hpp: peak_fp32_gflops) that the matrix products reach.
//
//   ./build/bench_real [--workers N] [--batch B] [--repeats R] [--widths 128,64] [--no-cnn]
//
// Each problem's last timed step is checked, "#wrong" (bench_util.hpp: Check),
// against the same step on one thread.
//
// FLOPs are counted by formula, 2 per multiply-add, for the matrix products
// only (activations, softmax, im2col and pooling are not counted, so the %
// of peak is a lower bound on the GEMM efficiency):
//   MLP, layer sizes s_0 … s_L:  forward Σ_l s_{l−1}s_l, ∇W Σ_l s_{l−1}s_l,
//        input gradients Σ_{l≥2} s_{l−1}s_l  (per sample, × 2).
//   CNN (5×5 kernels, 28 → 24 → 12 → 8 → 4, channels c1, c2, 10 classes):
//        conv1 576·25·c1 (forward, ∇W), conv2 64·25·c1·c2 (forward, ∇W, δcols),
//        fc 16·c2·10 (forward, ∇W, δinput)  (per sample, × 2).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim/core/isa.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

namespace {

struct Timing {
  double median_s, min_s, max_s;
  Check check;  // the last step's gradients, against the same step on one thread
};

// The gradients of step `step`: their mean when the cluster streams it (the
// gradients plus their fixed-tree sum, as Adam's step computes them), else
// every worker's row.
std::vector<float> gradients_of(Cluster& cluster, int64_t step) {
  if (cluster.streams_mean()) {
    cluster.compute_gradient_mean(step);
    const std::span<const float> mean = cluster.streamed_mean(WireDtype::kFp32);
    return {mean.begin(), mean.end()};
  }
  cluster.compute_gradients(step);
  std::vector<float> rows;
  const WorkerBuffers g = cluster.grads();
  for (int i = 0; i < cluster.workers(); ++i) rows.insert(rows.end(), g[i].begin(), g[i].end());
  return rows;
}

Timing time_gradients(const Json& problem, int workers, int batch, int repeats) {
  const Json raw = {{"name", "bench"},
                    {"steps", 1000000},
                    {"grad_norm_every", 0},
                    {"problem", problem},
                    {"cluster", {{"workers", workers}, {"batch_size", batch}}},
                    {"optimizer", {{"name", "adam"}}}};
  Simulation sim(resolve_experiment(raw, "bench"));
  Cluster& cluster = sim.cluster();
  // Adam reads the gradients' mean only, so the cluster streams it (the
  // gradients plus their fixed-tree sum, as a step computes them).
  const auto gradients = [&](int64_t step) {
    if (cluster.streams_mean()) {
      cluster.compute_gradient_mean(step);
    } else {
      cluster.compute_gradients(step);
    }
  };
  for (int64_t w = 0; w < 2; ++w) gradients(w);  // workspaces, first touches
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    gradients(2 + r);
    t.push_back(seconds_since(t0));
  }
  // The parameters never change here, so step s's gradients are a function
  // of s alone: a fresh simulation on one thread must give the same bits.
  Check check;
  check.compare(gradients_of(cluster, 1 + repeats), on_one_thread([&] {
                  Simulation ref(resolve_experiment(raw, "bench"));
                  return gradients_of(ref.cluster(), 1 + repeats);
                }));
  return {median(t), *std::min_element(t.begin(), t.end()), *std::max_element(t.begin(), t.end()),
          check};
}

void report(const char* what, const Timing& t, double samples, double flops_per_sample,
            const PeakFlops& peak) {
  // The median is the headline; the fastest step is printed too because on
  // a shared machine the median includes time slices lost to other processes.
  const double gflops = samples * flops_per_sample / t.median_s / 1e9;
  const double best_gflops = samples * flops_per_sample / t.min_s / 1e9;
  const auto pct = [&](double g) { return peak.gflops > 0 ? 100.0 * g / peak.gflops : 0.0; };
  std::printf("%s\n", what);
  std::printf("  step (all workers' gradients): median %.3f ms  [min %.3f, max %.3f]\n",
              1e3 * t.median_s, 1e3 * t.min_s, 1e3 * t.max_s);
  std::printf("  worker-samples/s: median %.0f  (fastest step: %.0f)\n", samples / t.median_s,
              samples / t.min_s);
  std::printf(
      "  matrix products: %.3f MFLOP/sample, %.2f GFLOP/s = %.1f %% of peak  (fastest "
      "step: %.2f GFLOP/s = %.1f %%)\n",
      flops_per_sample / 1e6, gflops, pct(gflops), best_gflops, pct(best_gflops));
  print_check("gradients of the last step", t.check, "the same step on one thread");
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 16, batch = 32, repeats = 21;
  bool cnn = true;
  std::vector<int64_t> widths = {128};
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--workers") && has_value) {
      workers = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--batch") && has_value) {
      batch = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeats") && has_value) {
      repeats = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--widths") && has_value) {
      widths.clear();
      for (char* p = argv[++i]; *p;) {
        widths.push_back(std::strtoll(p, &p, 10));
        if (*p == ',') ++p;
      }
    } else if (!std::strcmp(argv[i], "--no-cnn")) {
      cnn = false;
    } else {
      std::fprintf(stderr,
                   "usage: bench_real [--workers N] [--batch B] [--repeats R] [--widths 128,64] "
                   "[--no-cnn]\n");
      return 2;
    }
  }
  const PeakFlops peak = peak_fp32_gflops();
  std::printf(
      "bench_real: %d workers × batch %d, %d threads; measured fp32 peak %.1f GFLOP/s "
      "(%s); products dispatched to %s%s\n",
      workers, batch, omp_get_max_threads(), peak.gflops, peak.isa, isa_name(active_isa()),
#if defined(__AVX512F__)
      ", built with AVX-512"
#elif defined(__AVX2__)
      ", built with AVX2"
#else
      ", built without AVX (BITLAB_NATIVE=OFF, the default)"
#endif
  );
  const double samples = double(workers) * batch;

  {
    std::vector<double> sizes = {784};
    for (const int64_t w : widths) sizes.push_back(double(w));
    sizes.push_back(10);
    double macs = 0.0;
    std::string label = "784";
    for (size_t l = 1; l < sizes.size(); ++l) {
      macs += (l >= 2 ? 3.0 : 2.0) * sizes[l - 1] * sizes[l];
      label += "-" + std::to_string(int64_t(sizes[l]));
    }
    const Json problem = {{"name", "deep_mlp"},
                          {"dataset", "fashion_mnist"},
                          {"widths", widths},
                          {"activation", "relu"},
                          {"test_samples", 100}};
    report(("Fashion-MNIST MLP " + label + " relu").c_str(),
           time_gradients(problem, workers, batch, repeats), samples, 2.0 * macs, peak);
  }
  if (cnn) {
    const double c1 = 8, c2 = 16;
    const double macs = 2.0 * 576 * 25 * c1 + 3.0 * 64 * 25 * c1 * c2 + 3.0 * 16 * c2 * 10;
    const Json problem = {{"name", "cnn"}, {"channels", {8, 16}}, {"test_samples", 100}};
    report("Fashion-MNIST CNN conv5x5x8-pool-conv5x5x16-pool-fc10",
           time_gradients(problem, workers, batch, repeats), samples, 2.0 * macs, peak);
  }
  return exit_status();
}
