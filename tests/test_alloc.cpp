// The principle that step() does not allocate once sizes are steady (docs/design.md,
// principles): after a warm-up, whole Simulation steps — gradients, the
// optimizer, every collective — make no heap allocation, for every optimizer
// and phase. Counted with the test binary's replaced operator new
// (tests/alloc_counter.*); the MPI backend's steps are checked by the `mpi`
// suite with the same function under mpirun.
#include <doctest/doctest.h>

#include <cmath>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/alloc_counter.hpp"
#include "tests/fixtures.hpp"

namespace bitlab::testing {

const char* const* steady_step_optimizers() {
  static const char* const kOptimizers[] = {
      R"({"name": "sgd", "lr": 0.01})",
      R"({"name": "momentum_sgd", "lr": 0.01})",
      R"({"name": "adam", "lr": 0.01})",
      R"({"name": "adam", "lr": 0.01, "wire": "fp16"})",
      R"({"name": "lamb", "lr": 0.01})",
      // PowerSGD (sim/collectives/powersgd.hpp): error rows, P and Q rows, Q's memory.
      R"({"name": "adam", "lr": 0.01, "gradient_exchange": {"name": "powersgd",
          "start_powerSGD_iter": 10, "matrix_approximation_rank": 2}})",
      R"({"name": "sgd", "lr": 0.01, "gradient_exchange": {"name": "powersgd",
          "start_powerSGD_iter": 0, "use_error_feedback": false, "warm_start": false}})",
      R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 10})",
      R"({"name": "apmsqueeze", "lr": 0.01, "freeze_step": 10})",
      R"({"name": "onebit_lamb", "lr": 0.01, "freeze_step": 10})",
      R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 8, "var_update_scaler": 2,
          "local_step_scaler": 2, "local_step_clipper": 4})",
      // No local step within the run (the default local_step_scaler): shared rows.
      R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 8, "var_update_scaler": 2})",
      R"({"name": "loco", "lr": 0.01})",
      R"({"name": "loco", "lr": 0.01, "node_size": 4})",  // two_stage, several nodes
      R"({"name": "loco", "lr": 0.01, "exchange": "flat", "rounding": "stochastic", "gather": "quantized"})",
      R"({"name": "loco", "lr": 0.01, "exchange": "allgather", "node_size": 4})",
      R"({"name": "binsgdm", "lr": 0.01})",
      R"({"name": "binsgdm", "lr": 0.01, "node_size": 4})",
      nullptr};
  return kOptimizers;
}

int64_t steady_step_allocations(const std::string& optimizer, Transport* transport) {
  // No eval step and no grad-norm step among the counted ones (evaluation
  // allocates its result row); the network model prices every step.
  const Json raw = Json::parse(R"({"name": "alloc", "seed": 3, "steps": 1000, "eval_every": 0,
      "grad_norm_every": 0,
      "problem": {"name": "mlp", "input_dim": 8, "hidden": 16, "classes": 4, "samples": 512},
      "cluster": {"workers": 8, "batch_size": 8, "sharding": "iid"},
      "network": {"preset": "ethernet_40g_v100x4"},
      "optimizer": )" + optimizer +
                               "}");
  Simulation sim(resolve_experiment(raw, "alloc"), transport);
  sim.comm().log().reserve(100000);
  for (int t = 0; t < 40; ++t) sim.step();
  const CountAllocations counter;
  for (int t = 0; t < 40; ++t) sim.step();
  return counter.count();
}

}  // namespace bitlab::testing

using bitlab::testing::CountAllocations;
using namespace bitlab;

TEST_SUITE("alloc") {
  TEST_CASE("the counter counts (so a zero below means something)") {
    const CountAllocations counter;
    auto* v = new std::vector<float>(100);
    // The buffer escapes, so the compiler may not elide its allocation (a
    // unity build inlines enough to do so).
    asm volatile("" : : "g"(v->data()) : "memory");
    delete v;
    CHECK(counter.count() == 2);  // the vector object and its buffer
  }

  TEST_CASE("after a warm-up, Simulation steps allocate nothing, for every optimizer") {
    for (const char* const* o = bitlab::testing::steady_step_optimizers(); *o != nullptr; ++o) {
      const std::string optimizer = *o;
      CAPTURE(optimizer);
      CHECK(bitlab::testing::steady_step_allocations(*o) == 0);
    }
  }

  TEST_CASE("after a warm-up, steps of the real problems allocate nothing (grouped passes)") {
    // The classifiers and the transformer run several workers per
    // Problem::loss_grad_workers pass (6 workers: groups of 3 on 2 threads,
    // 6 on 1); their workspaces, packed operands and group lists must be
    // reused from step to step.
    bool skipped = false;
    const std::vector<std::string> problems = testing::small_real_models(&skipped);
    if (skipped) {
      MESSAGE("transformer case skipped: the Debian package fortunes-min is not installed");
    }
    for (const std::string& problem : problems) {
      CAPTURE(problem);
      const Json raw = Json::parse(R"({"name": "alloc", "seed": 3, "steps": 1000,
          "eval_every": 0, "grad_norm_every": 0, "problem": )" + problem + R"(,
          "cluster": {"workers": 6, "batch_size": 5},
          "optimizer": {"name": "adam", "lr": 0.001}})");
      Simulation sim(resolve_experiment(raw, "alloc"));
      sim.comm().log().reserve(100000);
      for (int t = 0; t < 10; ++t) sim.step();
      const CountAllocations counter;
      for (int t = 0; t < 10; ++t) sim.step();
      CHECK(counter.count() == 0);
    }
  }

  // opt's planned_state_bytes(shape) against the bytes its setup(cluster)
  // asks operator new for, within ±5 % (the tolerance of the case below);
  // returns those bytes.
  double check_plan_is_setup(Optimizer& opt, Cluster& cluster, const Optimizer::StateShape& shape) {
    const double estimate = static_cast<double>(opt.planned_state_bytes(shape));
    const CountAllocations counter;
    opt.setup(cluster);
    const double measured = static_cast<double>(counter.bytes());
    CAPTURE(estimate);
    CAPTURE(measured);
    CHECK(std::abs(estimate / measured - 1.0) <= 0.05);
    return measured;
  }

  // The quadratic of d parameters in 4 tensors.
  std::unique_ptr<Problem> quadratic_in_tensors(size_t d) {
    const auto* pe = find_entry(problem_registry(), "quadratic");
    REQUIRE(pe != nullptr);
    const Json raw = {{"name", "quadratic"}, {"dim", d}, {"tensors", 4}};
    return pe->make(pe->resolve(raw, "problem"), DataScope{});
  }

  TEST_CASE("an optimizer's planned_state_bytes is what its setup() allocates, for every optimizer") {
    // The memory check adds Optimizer::planned_state_bytes to the cluster's buffers
    // before anything is allocated; here it is compared with the bytes
    // setup() asks operator new for. d = 2^16 in 4 tensors (no padding: d is
    // a multiple of 8n and of LoCo's n·group), 8 and 16 workers, 4 per node.
    // Tolerance ±5 %: the estimates leave out what does not scale with d
    // (per-tensor scalars), and the counter adds
    // what setup() frees again. A missing buffer is at least d floats of
    // 12 d + (4 to 16)·n·d bytes: 10 % or more, outside.
    const size_t d = size_t{1} << 16;
    const auto problem = quadratic_in_tensors(d);
    for (const char* const* o = testing::steady_step_optimizers(); *o != nullptr; ++o) {
      for (const int n : {8, 16}) {
        const std::string optimizer = *o;
        CAPTURE(optimizer);
        CAPTURE(n);
        ClusterOptions co;
        co.workers = n;
        Cluster cluster(co, *problem, 1);
        cluster.set_gpus_per_node(4);
        const Json j = Json::parse(optimizer);
        const auto* oe = find_entry(optimizer_registry(), j.at("name").get<std::string>());
        REQUIRE(oe != nullptr);
        const auto opt = oe->make(oe->resolve(j, "optimizer"));
        check_plan_is_setup(*opt, cluster, {n, n, d, 4, &cluster.tensors()});
      }
    }
  }

  TEST_CASE("0/1 Adam told a run without local steps plans and allocates no per-worker row") {
    // As above (same problem, ±5 %), with set_run_steps: 40 steps of which
    // the last 32 are stage B, every one a sync (local_step_scaler 32768), so
    // setup() holds one m row, one u row and a scratch row per thread beside
    // the 1-bit allreduce's errors; told 40000 steps (a local step after
    // step 8 + 32768), the 3 rows per worker are back.
    const size_t d = size_t{1} << 16;
    const auto problem = quadratic_in_tensors(d);
    const auto* oe = find_entry(optimizer_registry(), "zero_one_adam");
    REQUIRE(oe != nullptr);
    const Json j = {{"name", "zero_one_adam"}, {"lr", 0.01}, {"var_freeze_step", 8}};
    const int n = 16;
    double bytes[2] = {};
    for (const int64_t steps : {40, 40000}) {
      CAPTURE(steps);
      ClusterOptions co;
      co.workers = n;
      Cluster cluster(co, *problem, 1);
      const auto opt = oe->make(oe->resolve(j, "optimizer"));
      opt->set_run_steps(steps);
      bytes[steps == 40000] = check_plan_is_setup(*opt, cluster, {n, n, d, 0});
      CHECK(cluster.has_local_params() == (steps == 40000));
    }
    // 3·16 rows of d floats against 2 + threads: at least 2·d·4 bytes a worker fewer.
    CHECK(bytes[1] - bytes[0] >= 2.0 * n * d * 4);
  }
}
