// Benchmark (run on demand, not a test): the transformer problem's speed.
//
//   ./build/bench_transformer [--workers N] [--batch B] [--repeats R]
//
// Default: the problem's default model (d_model 96, 3 blocks, 4 heads, context
// 64, ≈ 0.36 M parameters) on the default fortune files, N = 16 workers × B = 8
// windows of 64 characters per worker and step, Adam with an exact fp32
// allreduce. Three rows:
//   whole step      Simulation::step(): every worker's loss + gradient (in
//                   parallel over workers), the allreduce, Adam. Simulated
//                   worker-samples/s = N·B / median step time (tokens/s = ×64).
//   gradients only  the same N workers' losses and gradients, in groups of
//                   workers as the cluster forms them (Cluster::group_size),
//                   one loss_grad_workers pass each, OpenMP over groups:
//                   what the model itself costs.
//   one GEMM shape  the largest product of the model, the MLP's (N_tok × d) ·
//                   (d × 4d) with N_tok = B·64, every thread multiplying its
//                   own matrices with sim/kernels/matmul.hpp: what the product
//                   alone reaches on these shapes.
// FLOPs are the matrix products' by formula (transformer_matmul_flops: 2 per
// multiply-add, forward + backward), so GFLOP/s and "% of peak" (against
// bench_util.hpp's measured FMA peak over all threads) leave out layer norm,
// softmax, GELU, the loss and the optimizer, which take time but few FLOPs.
// Each row's result is checked, "#wrong" (bench_util.hpp: Check): the whole
// step's parameters and the gradients against the same work on one thread,
// the product against its known answer (ones times ones: d).
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "problems/synthetic.hpp"
#include "problems/transformer.hpp"
#include "sim/core/isa.hpp"
#include "sim/kernels/matmul.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/bench/bench_sim.hpp"
#include "tests/bench/bench_util.hpp"

using namespace bitlab;
using namespace bitlab::bench;

namespace {

struct Row {
  const char* label;
  double median_s;
  double flops;  // per timed repetition
};

void print_row(const Row& r, double peak_gflops, double samples, double tokens_per_sample) {
  const double gflops = r.flops / r.median_s / 1e9;
  std::printf("%-16s %10.2f %14.0f %12.0f %9.2f %8.1f%%\n", r.label, r.median_s * 1e3,
              samples > 0 ? samples / r.median_s : 0.0, samples * tokens_per_sample / r.median_s,
              gflops, peak_gflops > 0 ? 100.0 * gflops / peak_gflops : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  int workers = 16, batch = 8, repeats = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--workers"))
      workers = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--batch"))
      batch = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_transformer [--workers N] [--batch B] [--repeats R]\n");
      return 2;
    }
  }
  const std::string text =
      R"({"name": "bench", "steps": 1000000, "grad_norm_every": 0,
          "problem": {"name": "transformer"},
          "cluster": {"workers": )" +
      std::to_string(workers) + R"(, "batch_size": )" + std::to_string(batch) + R"(},
          "optimizer": {"name": "adam", "lr": 0.001}})";
  Simulation sim(resolve_experiment(Json::parse(text), "bench"));
  const Json& p = sim.experiment().problem;
  TransformerShape shape;
  shape.context = p.at("context").get<int64_t>();
  shape.d_model = p.at("d_model").get<int64_t>();
  shape.layers = p.at("layers").get<int64_t>();
  shape.heads = p.at("heads").get<int64_t>();
  shape.mlp_ratio = p.at("mlp_ratio").get<int64_t>();
  shape.vocab = static_cast<int64_t>(sim.problem().tensors().front().size) / shape.d_model;
  const double step_flops = transformer_matmul_flops(shape, int64_t{workers} * batch);
  const double samples = static_cast<double>(workers) * batch;

  std::printf(
      "bench_transformer: d_model %lld, %lld blocks, %lld heads, context %lld, vocab %lld, "
      "%zu parameters\n",
      (long long)shape.d_model, (long long)shape.layers, (long long)shape.heads,
      (long long)shape.context, (long long)shape.vocab, sim.problem().dim());
  std::printf("N = %d workers x %d windows, threads: %d, matmul FLOPs per step: %.2f G\n", workers,
              batch, omp_get_max_threads(), step_flops / 1e9);
  const PeakFlops peak = peak_fp32_gflops();
  std::printf("peak fp32 (%s, %d threads, measured): %.1f GFLOP/s\n", peak.isa, peak.threads,
              peak.gflops);
  std::printf("products and GELU dispatched to %s (sim/kernels/matmul.hpp; BITLAB_ISA forces one)\n",
              isa_name(active_isa()));

  // Whole simulated steps.
  for (int w = 0; w < 2; ++w) sim.step();
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    sim.step();
    t.push_back(seconds_since(t0));
  }
  const Row whole{"whole step", median(t), step_flops};
  Check whole_check;  // the parameters reached, against the same steps on one thread
  whole_check.compare(sim.cluster().params(), params_after_steps(text, 2 + repeats, 1));

  // Gradients only, the cluster's way: OpenMP over workers, one workspace each.
  const Problem& problem = sim.problem();
  std::vector<std::unique_ptr<Workspace>> ws;
  std::vector<std::vector<float>> grads(static_cast<size_t>(workers),
                                        std::vector<float>(problem.dim()));
  for (int w = 0; w < workers; ++w) ws.push_back(problem.make_workspace());
  const auto params = sim.cluster().params();
  const std::vector<float> x(params.begin(), params.end());
  std::vector<uint32_t> batch_ids(static_cast<size_t>(workers * batch));
  for (size_t i = 0; i < batch_ids.size(); ++i) {
    batch_ids[i] = static_cast<uint32_t>((i * 7919) % problem.num_train());
  }
  const RngStream noise(0, Purpose::kGradNoise);
  std::vector<WorkerBatch> jobs;
  for (int w = 0; w < workers; ++w) {
    jobs.push_back({std::span<const uint32_t>(batch_ids).subspan(static_cast<size_t>(w * batch),
                                                                 static_cast<size_t>(batch)),
                    grads[static_cast<size_t>(w)], &noise});
  }
  const int group = Cluster::group_size(workers, omp_get_max_threads(), size_t(batch),
                                        problem.pass_samples());
  const int groups = (workers + group - 1) / group;
  const auto grads_once = [&] {
#pragma omp parallel for schedule(dynamic, 1)
    for (int k = 0; k < groups; ++k) {
      const int lo = k * group, hi = std::min(workers, lo + group);
      problem.loss_grad_workers(x, std::span(jobs).subspan(size_t(lo), size_t(hi - lo)),
                                *ws[static_cast<size_t>(k)]);
    }
  };
  grads_once();
  t.clear();
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    grads_once();
    t.push_back(seconds_since(t0));
  }
  const Row gradients{"gradients only", median(t), step_flops};
  // The same jobs, the groups one after the other on one thread.
  const std::vector<std::vector<float>> timed_grads = grads;
  on_one_thread([&] {
    grads_once();
    return 0;
  });
  Check grads_check;
  for (int w = 0; w < workers; ++w) {
    grads_check.compare(timed_grads[static_cast<size_t>(w)], grads[static_cast<size_t>(w)]);
  }

  // The MLP's product on its own, one per thread.
  const int threads = omp_get_max_threads();
  const Eigen::Index n_tok = Eigen::Index{batch} * shape.context, d = shape.d_model,
                     f = shape.mlp_ratio * shape.d_model;
  std::vector<RowMatrixF> a(static_cast<size_t>(threads), RowMatrixF::Ones(n_tok, d)),
      b(static_cast<size_t>(threads), RowMatrixF::Ones(f, d)),
      c(static_cast<size_t>(threads), RowMatrixF::Zero(n_tok, f));
  const int gemm_reps = 20;
  std::vector<std::vector<float>> packed(static_cast<size_t>(threads));
  t.clear();
  for (int r = 0; r < repeats + 1; ++r) {
    const auto t0 = Clock::now();
#pragma omp parallel
    {
      const auto k = static_cast<size_t>(omp_get_thread_num());
      for (int i = 0; i < gemm_reps; ++i) matmul_nt(a[k], b[k], c[k], packed[k]);
    }
    if (r > 0) t.push_back(seconds_since(t0));
  }
  const Row gemm{"one GEMM shape", median(t),
                 2.0 * double(n_tok) * double(d) * double(f) * gemm_reps * threads};
  // A known answer: a row of ones times a row of ones sums d ones, exactly d
  // in float (d < 2^24).
  Check gemm_check;
  for (const RowMatrixF& ck : c) {
    const std::vector<float> want(static_cast<size_t>(ck.size()), static_cast<float>(d));
    gemm_check.compare({ck.data(), static_cast<size_t>(ck.size())}, want);
  }

  std::printf("%-16s %10s %14s %12s %9s %9s\n", "case", "median_ms", "samples/s", "tokens/s",
              "GFLOP/s", "of_peak");
  const auto context = static_cast<double>(shape.context);
  print_row(whole, peak.gflops, samples, context);
  print_check("parameters", whole_check, "the same steps on one thread");
  print_row(gradients, peak.gflops, samples, context);
  print_check("gradients", grads_check, "the same groups on one thread");
  print_row(gemm, peak.gflops, 0, context);
  print_check("products", gemm_check, "the known answer d");
  std::printf(
      "(samples = worker-windows of %lld tokens; GFLOP/s counts matrix products only; the GEMM "
      "row is %d x (%lld x %lld)·(%lld x %lld) per thread)\n",
      (long long)shape.context, gemm_reps, (long long)n_tok, (long long)d, (long long)d,
      (long long)f);
  return exit_status();
}
