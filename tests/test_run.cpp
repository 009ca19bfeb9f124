#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "sim/engine/simulation.hpp"

using namespace bitlab;

namespace {
Experiment make(const std::string& text) {
  return resolve_experiment(Json::parse(text), "t");
}

// Everything a run measures, for bit-for-bit comparison (wall time excluded).
struct RunTrace {
  std::vector<double> values;
  std::vector<float> params;
  bool operator==(const RunTrace& o) const {
    return values.size() == o.values.size() && params.size() == o.params.size() &&
           std::memcmp(values.data(), o.values.data(), values.size() * 8) == 0 &&
           std::memcmp(params.data(), o.params.data(), params.size() * 4) == 0;
  }
};

RunTrace trace(const Experiment& e, int threads, bool with_bytes = true) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  Simulation sim(e);
  RunTrace t;
  for (int64_t s = 0; s < e.run.steps; ++s) {
    const auto& m = sim.step();
    t.values.push_back(m.train_loss);
    t.values.push_back(m.grad_norm);
    if (with_bytes) t.values.push_back(m.bytes_sent_cum);
    for (double v : m.eval) t.values.push_back(v);
  }
  auto x = sim.cluster().params();
  t.params.assign(x.begin(), x.end());
  omp_set_num_threads(saved);
  return t;
}
}  // namespace

TEST_SUITE("run") {
  TEST_CASE("metrics and parameters are bit-identical for 1 and 2 threads") {
    const char* cases[] = {
        R"({"steps": 20, "eval_every": 5, "problem": {"name": "logistic"},
            "cluster": {"workers": 6, "batch_size": 16},
            "optimizer": {"name": "adam", "lr": 0.05}})",
        R"({"steps": 15, "eval_every": 5, "problem": {"name": "mlp"},
            "cluster": {"workers": 5, "batch_size": 8, "sharding": "label_skew"},
            "optimizer": {"name": "lamb", "lr": 0.01}})",
        R"({"steps": 10, "problem": {"name": "quadratic", "dim": 50000, "noise": 0.1},
            "cluster": {"workers": 3}, "optimizer": {"name": "momentum_sgd", "lr": 0.01}})",
    };
    for (const char* c : cases) {
      const Experiment e = make(c);
      CHECK(trace(e, 1) == trace(e, 2));
    }
  }

  TEST_CASE("N workers with identical shards equal one worker bit-for-bit (N a power of 2)") {
    const std::string base = R"({"steps": 12, "eval_every": 4, "problem": {"name": "logistic"},
        "cluster": {"workers": 1, "batch_size": "full", "sharding": "replicated"},
        "optimizer": {"name": "adam", "lr": 0.05}})";
    // Bytes differ (more workers talk): compare losses, norms, evals, params.
    const RunTrace one = trace(make(base), 2, false);
    for (int n : {2, 4, 8}) {
      Json j = Json::parse(base);
      j["cluster"]["workers"] = n;
      CHECK(trace(resolve_experiment(j, "t"), 2, false) == one);
    }
  }

  TEST_CASE("the quadratic converges to its optimum with exact Adam") {
    Simulation sim(make(R"({"steps": 400, "problem": {"name": "quadratic", "dim": 20},
        "cluster": {"workers": 4}, "optimizer": {"name": "adam", "lr": 0.05}})"));
    for (int s = 0; s < 400; ++s) sim.step();
    CHECK(sim.evaluate()[0] < 1e-3);  // eval_loss = f(x) - f*, started at ~10
  }
}

TEST_SUITE("run") {
  TEST_CASE(
      "time model: metrics carry compute/comm/step time; stragglers add exactly their excess") {
    // 4 workers on one node of a custom network: α = 10 us, B = 8 Gbit/s =
    // 1e9 B/s; quadratic d = 1000, adam fp32: one ring allreduce of S = 4000 B:
    // 2(p-1)α + 2(p-1)/p·S/B = 60 us + 6 us = 66 us per step.
    const std::string base = R"({"steps": 5, "problem": {"name": "quadratic", "dim": 1000},
        "cluster": {"workers": 4}, "optimizer": {"name": "adam"},
        "network": {"preset": "custom", "gpus_per_node": 4, "intra_latency_us": 10,
                    "intra_bandwidth_gbps": 8, "inter_latency_us": 10, "inter_bandwidth_gbps": 8},
        "compute": {"step_ms": 10}})";
    Simulation plain(make(base));
    Json j = Json::parse(base);
    j["compute"]["straggler_worker"] = 2;
    j["compute"]["straggler_factor"] = 1.5;
    Simulation slow(resolve_experiment(j, "t"));
    double sum = 0;
    for (int s = 0; s < 5; ++s) {
      const StepMetrics a = plain.step();
      const StepMetrics b = slow.step();
      CHECK(a.compute_s == 0.010);
      CHECK(a.comm_s == doctest::Approx(66e-6).epsilon(1e-12));
      CHECK(a.step_s == a.compute_s + a.comm_s);
      // the step waits for the slowest worker: exactly its excess, 5 ms
      CHECK(b.step_s - a.step_s == doctest::Approx(0.005).epsilon(1e-12));
      sum += a.step_s;
      CHECK(a.sim_time_s == doctest::Approx(sum).epsilon(1e-15));
    }
  }

  TEST_CASE("time model with jitter: bit-identical for 1 and 2 threads; no network: no time") {
    const Experiment e = make(R"({"steps": 6, "problem": {"name": "logistic"},
        "cluster": {"workers": 8, "batch_size": 8}, "optimizer": {"name": "onebit_adam",
        "freeze_step": 3}, "network": {"preset": "ethernet_40g_v100x4"},
        "compute": {"device_tflops": 10, "model_params": 1e8, "jitter": 0.1,
                    "memory_bandwidth_gbytes_per_s": 900}})");
    auto times = [&](int threads) {
      omp_set_num_threads(threads);
      Simulation sim(e);
      std::vector<double> out;
      for (int s = 0; s < 6; ++s) {
        const auto& m = sim.step();
        out.push_back(m.step_s);
        out.push_back(m.comm_s);
      }
      return out;
    };
    const auto one = times(1), two = times(2);
    omp_set_num_threads(2);
    CHECK(std::memcmp(one.data(), two.data(), one.size() * 8) == 0);
    // 8 workers on 4-GPU nodes: 2 nodes; compressed steps cost more than 0
    CHECK(one[7] > 0.0);
    Simulation none(make(R"({"steps": 1, "problem": {"name": "logistic"},
        "optimizer": {"name": "adam"}})"));
    CHECK(std::isnan(none.step().step_s));
    CHECK(none.topology() == nullptr);
  }
}
