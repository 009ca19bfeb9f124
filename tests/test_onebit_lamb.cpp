// 1-bit LAMB (optimizers/onebit_lamb): the warm-up is `lamb` bit-for-bit; after
// the switch C_p and v are frozen, v_fresh moves, k_p is computed once, f_p is
// clamped, each step is one flat compressed allreduce whose result the test
// reproduces with its own OneBitAllreduce; the zero-momentum guard; thread
// invariance; a convergence sanity run; schema errors.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/onebit_lamb.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;
using bitlab::testing::config_error_message;

Experiment make_lamb(const std::string& text) {
  return resolve_experiment(Json::parse(text), "t");
}

OneBitLamb& as_onebit_lamb(Simulation& sim) {
  auto* opt = dynamic_cast<OneBitLamb*>(&sim.optimizer());
  REQUIRE(opt != nullptr);
  return *opt;
}

std::vector<float> copy_of(std::span<const float> s) {
  return {s.begin(), s.end()};
}
std::vector<double> copy_of(std::span<const double> s) {
  return {s.begin(), s.end()};
}

// Everything a run measures (wall time excluded) and its final parameters.
struct LambTrace {
  std::vector<double> values;
  std::vector<float> params;
  std::vector<std::string> phases;
  std::vector<double> last_eval;  // the eval columns of the last eval step
  std::vector<std::string> eval_columns;
  bool operator==(const LambTrace& o) const {
    return values.size() == o.values.size() &&
           std::memcmp(values.data(), o.values.data(), values.size() * sizeof(double)) == 0 &&
           bit_equal(params, o.params) && phases == o.phases;
  }
};

LambTrace trace_lamb(const Experiment& e, int threads = 0, bool with_bytes = true) {
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  Simulation sim(e);
  LambTrace t;
  for (int64_t s = 0; s < e.run.steps; ++s) {
    const StepMetrics& m = sim.step();
    t.values.push_back(m.train_loss);
    t.values.push_back(m.grad_norm);
    if (with_bytes) t.values.push_back(m.bytes_sent_cum);
    for (double v : m.eval) t.values.push_back(v);
    if (!m.eval.empty()) t.last_eval = m.eval;
    t.phases.emplace_back(m.phase);
  }
  t.eval_columns = sim.eval_columns();
  const auto x = sim.cluster().params();
  t.params.assign(x.begin(), x.end());
  omp_set_num_threads(saved);
  return t;
}

// k_p = mean_q rms(m_q) / rms(m_p), rms = ‖·‖/sqrt(size), written out again.
std::vector<double> expected_scaling(const std::vector<float>& m,
                                     const std::vector<TensorInfo>& tensors) {
  std::vector<double> rms;
  double mean = 0.0;
  for (const auto& t : tensors) {
    double ss = 0.0;
    for (size_t k = t.offset; k < t.offset + t.size; ++k) ss += double{m[k]} * m[k];
    rms.push_back(std::sqrt(ss) / std::sqrt(static_cast<double>(t.size)));
    mean += rms.back();
  }
  mean /= static_cast<double>(tensors.size());
  for (double& r : rms) r = mean / r;
  return rms;
}

bool close(double a, double b, double rel) {
  return std::abs(a - b) <= rel * std::max({1.0, std::abs(a), std::abs(b)});
}

// A problem with two tensors, "live" (gradient x − 1) and "dead" (gradient
// always exactly 0): the zero-momentum case of the first compression step.
class DeadTensorProblem : public Problem {
 public:
  DeadTensorProblem() {
    tensors_.push_back({"live", 0, 8});
    tensors_.push_back({"dead", 8, 4});
  }
  size_t dim() const override { return 12; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return 0; }
  void init_params(std::span<float> x, uint64_t) const override {
    for (size_t k = 0; k < x.size(); ++k) x[k] = 0.5f + 0.1f * static_cast<float>(k);
  }
  double loss_grad(std::span<const float> x, std::span<const uint32_t>, std::span<float> g,
                   const RngStream&, Workspace&) const override {
    double loss = 0.0;
    for (size_t k = 0; k < 8; ++k) {
      g[k] = x[k] - 1.0f;
      loss += 0.5 * double{g[k]} * g[k];
    }
    for (size_t k = 8; k < 12; ++k) g[k] = 0.0f;
    return loss;
  }
  std::vector<std::string> eval_columns() const override { return {}; }
  void evaluate(std::span<const float>, std::span<double>) const override {}

 private:
  std::vector<TensorInfo> tensors_;
};

constexpr const char* kMlp4 = R"({"steps": 30, "eval_every": 10, "problem": {"name": "mlp"},
    "cluster": {"workers": 4, "batch_size": 16}, "optimizer": {"name": "lamb", "lr": 0.01,
    "weight_decay": 0.01}})";

}  // namespace

TEST_SUITE("onebit_lamb") {
  TEST_CASE("a warm-up at least as long as the run is lamb bit-for-bit") {
    const Experiment lamb = make_lamb(kMlp4);
    REQUIRE(lamb.run.steps == 30);
    const LambTrace want = trace_lamb(lamb);
    for (int freeze : {30, 1000}) {
      CAPTURE(freeze);
      Json j = Json::parse(kMlp4);
      j["optimizer"]["name"] = "onebit_lamb";
      j["optimizer"]["freeze_step"] = freeze;
      LambTrace got = trace_lamb(resolve_experiment(j, "t"));
      for (const auto& p : got.phases) CHECK(p == "warmup");
      got.phases = want.phases;  // lamb's phase is "full"
      CHECK(got == want);        // losses, grad norms, bytes, evals, parameters
    }
  }

  TEST_CASE(
      "after the switch: frozen C_p and v, fresh v_fresh, k_p once, clamped f_p, one "
      "flat compressed allreduce reproduced independently") {
    const int64_t freeze = 10, steps = 24;
    // padding reuse (the reference's persistent fused buffer) and zeros; the
    // mirror follows the same rule.
    for (const auto& [wd, padding] :
         {std::pair<double, std::string>{0.0, "reuse"}, {0.01, "reuse"}, {0.01, "zeros"}}) {
      const double wd_value = wd;  // clang 14: no structured binding in CAPTURE
      CAPTURE(wd_value);
      const std::string padding_label = padding;  // clang 14: no structured binding in CAPTURE
      CAPTURE(padding_label);
      Json j = Json::parse(kMlp4);
      j["optimizer"] = {{"name", "onebit_lamb"},   {"lr", 0.01},
                        {"weight_decay", wd},      {"freeze_step", freeze},
                        {"factor_threshold", 0.1}, {"padding", padding}};
      // It reads every worker's gradient: the rows are kept.
      Simulation sim = testing::simulation_with_rows(resolve_experiment(j, "t"));
      OneBitLamb& opt = as_onebit_lamb(sim);
      const OneBitLambOptions& o = opt.options();
      const auto& tensors = opt.tensors();
      REQUIRE(tensors.size() == 4);  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
      const int n = 4;
      const size_t d = sim.cluster().dim();

      for (int64_t t = 1; t <= freeze; ++t) {
        CHECK(std::string(sim.step().phase) == "warmup");
        CHECK(sim.comm().log().size() == static_cast<size_t>(t));  // one allreduce each
      }
      // At t == T_w: v_fresh = v; C_p is the warm-up's EMA; no k_p yet.
      const std::vector<float> v_frozen = copy_of(opt.v());
      const std::vector<double> c_frozen = copy_of(opt.coeff_ema());
      CHECK(bit_equal(copy_of(opt.v_fresh()), v_frozen));
      CHECK(bit_equal(v_frozen, copy_of(opt.warmup().v())));
      for (double c : c_frozen) CHECK(c > 0.0);
      for (double k : opt.scaling_coeffs()) CHECK(k == 0.0);
      const std::vector<double> k_want = expected_scaling(copy_of(opt.m()), tensors);

      // The test's own compressed allreduce, fed the same worker momenta.
      OneBitAllreduce mirror(n, d);
      mirror.set_pad_reuse(padding == "reuse");
      Communicator scratch(n);
      const size_t D = onebit_padded_dim(d, n);
      REQUIRE(mirror.padded_dim() == D);
      const AdamCoeffs c =
          make_adam_coeffs(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, false, 1);
      std::vector<float> wm(static_cast<size_t>(n) * d), out(d);
      std::vector<double> k_first;

      for (int64_t t = freeze + 1; t <= steps; ++t) {
        CAPTURE(t);
        const std::vector<float> x_old = copy_of(sim.cluster().params());
        const std::vector<float> m_old = copy_of(opt.m());
        const std::vector<float> vf_old = copy_of(opt.v_fresh());
        const std::vector<double> f_old = copy_of(opt.factors());
        const size_t log_before = sim.comm().log().size();

        const StepMetrics& metrics = sim.step();
        CHECK(std::string(metrics.phase) == "compressed");
        CHECK(opt.compressing());

        // One flat compressed allreduce: exactly the four collectives of §1,
        // sized from the padded total dimension D.
        const auto& recs = sim.comm().log().records();
        REQUIRE(recs.size() == log_before + 4);
        CHECK(std::string(recs[log_before].op) == "alltoall");
        CHECK(recs[log_before].payload_bytes == static_cast<int64_t>(D / 8));
        CHECK(std::string(recs[log_before + 1].op) == "allgather");
        CHECK(recs[log_before + 1].payload_bytes == 4 * n);
        CHECK(std::string(recs[log_before + 2].op) == "allgather");
        CHECK(recs[log_before + 2].payload_bytes == static_cast<int64_t>(D / 8));
        CHECK(std::string(recs[log_before + 3].op) == "allgather");
        CHECK(recs[log_before + 3].payload_bytes == 4 * n);

        // C_p and v frozen; k_p computed at the first compression step from
        // the warm-up's momentum and never again.
        CHECK(copy_of(opt.coeff_ema()) == c_frozen);
        CHECK(bit_equal(copy_of(opt.v()), v_frozen));
        const std::vector<double> k = copy_of(opt.scaling_coeffs());
        for (size_t p = 0; p < tensors.size(); ++p) {
          CHECK(k[p] == doctest::Approx(k_want[p]).epsilon(1e-12));
        }
        if (t == freeze + 1) k_first = k;
        CHECK(k == k_first);

        // m = compressed_allreduce((β1 m + (1−β1) g_i)·k_p) / k_p, bit-for-bit.
        for (int i = 0; i < n; ++i) {
          const auto g = sim.cluster().grad(i);
          for (size_t p = 0; p < tensors.size(); ++p) {
            const float kf = static_cast<float>(k[p]);
            for (size_t e = tensors[p].offset; e < tensors[p].offset + tensors[p].size; ++e) {
              wm[static_cast<size_t>(i) * d + e] =
                  (c.beta1 * m_old[e] + c.one_minus_beta1 * g[e]) * kf;
            }
          }
        }
        mirror.run(scratch, WorkerBuffers{wm.data(), d, d, n}, out);
        const std::vector<float> m_new = copy_of(opt.m());
        bool m_match = true;
        for (size_t p = 0; p < tensors.size(); ++p) {
          const float kf = static_cast<float>(k[p]);
          for (size_t e = tensors[p].offset; e < tensors[p].offset + tensors[p].size; ++e) {
            m_match = m_match && (out[e] / kf == m_new[e]);
          }
        }
        CHECK(m_match);

        // v_fresh, u, f_p and x from the formulas of docs/algorithms.md §4.
        const std::vector<float> vf_new = copy_of(opt.v_fresh());
        const std::vector<float> x_new = copy_of(sim.cluster().params());
        const std::vector<double> f_new = copy_of(opt.factors());
        size_t bad_vf = 0, bad_x = 0;
        for (size_t p = 0; p < tensors.size(); ++p) {
          const TensorInfo& tens = tensors[p];
          float fmax = -std::numeric_limits<float>::infinity();
          double ss_up = 0.0, ss_u = 0.0;
          std::vector<float> u(tens.size);
          for (size_t q = 0; q < tens.size; ++q) {
            const size_t e = tens.offset + q;
            const float g_hat = (m_new[e] - m_old[e] * c.beta1) / c.one_minus_beta1;
            const float vf = c.beta2 * vf_old[e] + c.one_minus_beta2 * (g_hat * g_hat);
            if (!close(vf_new[e], vf, 1e-5)) ++bad_vf;
            const float denom = std::sqrt(v_frozen[e]) + c.eps;
            const float up = m_new[e] / denom;
            u[q] = up + c.weight_decay * x_old[e];
            ss_up += double{up} * up;
            ss_u += double{u[q]} * u[q];
            fmax = std::max(fmax, denom / (std::sqrt(vf_new[e]) + c.eps));
          }
          double f = fmax;
          if (wd > 0.0) {
            const double rho = std::min(1.0, std::sqrt(ss_up) / std::sqrt(ss_u));
            f = f * rho + (1.0 - rho);
          }
          f = std::clamp(f, o.factor_min, o.factor_max);
          f = std::clamp(f, f_old[p] * (1.0 - o.factor_threshold),
                         f_old[p] * (1.0 + o.factor_threshold));
          CHECK(f_new[p] == doctest::Approx(f).epsilon(1e-9));
          // f_p within [factor_min, factor_max] and within last·(1 ± threshold).
          CHECK(f_new[p] >= o.factor_min);
          CHECK(f_new[p] <= o.factor_max);
          CHECK(f_new[p] >= f_old[p] * (1.0 - o.factor_threshold));
          CHECK(f_new[p] <= f_old[p] * (1.0 + o.factor_threshold));
          const float step_size = static_cast<float>(o.lr * (c_frozen[p] * f_new[p]));
          for (size_t q = 0; q < tens.size; ++q) {
            const size_t e = tens.offset + q;
            if (!close(x_new[e], x_old[e] - step_size * u[q], 1e-6)) ++bad_x;
          }
        }
        CHECK(bad_vf == 0);
        CHECK(bad_x == 0);
      }
      // v_fresh has moved away from the frozen v.
      CHECK_FALSE(bit_equal(copy_of(opt.v_fresh()), v_frozen));
      // The run is still sane.
      CHECK(std::isfinite(sim.step().train_loss));
    }
  }

  TEST_CASE(
      "a tensor whose momentum is all zero at the first compression step is a clear "
      "error") {
    DeadTensorProblem problem;
    ClusterOptions co;
    co.workers = 2;
    Cluster cluster(co, problem, 1);
    Communicator comm(2);
    OneBitLambOptions o;
    o.lr = 0.01;
    o.freeze_step = 5;
    OneBitLamb opt(o);
    opt.setup(cluster);
    for (int64_t t = 1; t <= 5; ++t) {
      cluster.compute_gradients(t);
      comm.begin_step(t);
      StepContext ctx{t, cluster, comm};
      opt.finish_step(ctx);
    }
    cluster.compute_gradients(6);
    comm.begin_step(6);
    StepContext ctx{6, cluster, comm};
    std::string msg;
    try {
      opt.finish_step(ctx);
    } catch (const std::runtime_error& e) {
      msg = e.what();
      // A ConfigError: the CLI reports it as an error (exit 2), not a crash.
      CHECK(dynamic_cast<const ConfigError*>(&e) != nullptr);
    }
    CAPTURE(msg);
    CHECK(msg.find("tensor \"dead\"") != std::string::npos);
    CHECK(msg.find("\"live\"") == std::string::npos);
    CHECK(msg.find("exactly zero at the first compression step (step 6)") != std::string::npos);
    CHECK(msg.find("divide by zero") != std::string::npos);
    CHECK(msg.find("optimizer.freeze_step = 5") != std::string::npos);
  }

  TEST_CASE("1 and 2 threads give bit-identical runs across the switch") {
    const char* cases[] = {
        R"({"steps": 25, "eval_every": 5, "problem": {"name": "mlp"},
            "cluster": {"workers": 4, "batch_size": 16},
            "optimizer": {"name": "onebit_lamb", "lr": 0.01, "weight_decay": 0.01,
                          "freeze_step": 10}})",
        // Large enough for the parallel element loops (d = 50000 > 4096),
        // with a non-default padding multiple.
        R"({"steps": 12, "problem": {"name": "quadratic", "dim": 50000, "tensors": 3,
                                     "noise": 0.1},
            "cluster": {"workers": 3},
            "optimizer": {"name": "onebit_lamb", "lr": 0.01, "freeze_step": 5,
                          "pad_multiple": 48}})",
    };
    for (const char* text : cases) {
      CAPTURE(text);
      const Experiment e = make_lamb(text);
      const LambTrace one = trace_lamb(e, 1);
      CHECK(one.phases.back() == "compressed");
      CHECK(one == trace_lamb(e, 2));
    }
  }

  TEST_CASE("convergence sanity: the loss keeps decreasing after the switch (mlp, n = 8)") {
    // Measured (seed 0, freeze_step 60, lr 0.01): mean batch loss over steps
    // 61-100 0.2117, 101-200 0.1821, 201-300 0.1719; LAMB over 201-300
    // 0.1488. After step 300, 1-bit LAMB vs LAMB: eval_loss 0.2035 vs 0.2263,
    // eval_accuracy 0.9229 vs 0.9238, train_loss_full 0.1657 vs 0.1273. With
    // error_feedback off the batch loss rises again after step 150 (0.2066 ->
    // 0.2256 over steps 251-300). 1-bit LAMB should keep descending after the
    // switch, near LAMB, at 23 % of LAMB's bytes.
    const std::string base = R"({"steps": 300, "problem": {"name": "mlp"},
        "cluster": {"workers": 8, "batch_size": 32},
        "optimizer": {"name": "onebit_lamb", "lr": 0.01, "freeze_step": 60}})";
    const LambTrace t = trace_lamb(make_lamb(base), 0, false);
    auto window_mean = [&](int64_t from, int64_t to) {  // steps from..to, 1-based
      double s = 0.0;
      for (int64_t k = from; k <= to; ++k) s += t.values[static_cast<size_t>(2 * (k - 1))];
      return s / static_cast<double>(to - from + 1);
    };
    const double w1 = window_mean(61, 100), w2 = window_mean(101, 200), w3 = window_mean(201, 300);
    Json j = Json::parse(base);
    j["optimizer"] = {{"name", "lamb"}, {"lr", 0.01}};
    const LambTrace l = trace_lamb(resolve_experiment(j, "t"), 0, false);
    double lamb_last = 0.0;
    for (int64_t k = 201; k <= 300; ++k) lamb_last += l.values[static_cast<size_t>(2 * (k - 1))];
    lamb_last /= 100.0;
    std::string evals;
    for (size_t c = 0; c < t.eval_columns.size(); ++c) {
      evals += " " + t.eval_columns[c] + " " + std::to_string(t.last_eval[c]) + " (lamb " +
               std::to_string(l.last_eval[c]) + ")";
    }
    MESSAGE("onebit_lamb mean train loss: steps 61-100 ", w1, ", 101-200 ", w2, ", 201-300 ", w3,
            "; lamb 201-300 ", lamb_last, "; after step 300:", evals);
    CHECK(t.phases[60] == "compressed");
    CHECK(w2 < w1);
    CHECK(w3 < w2);
    CHECK(w3 < 1.25 * lamb_last);  // not far behind full-precision LAMB
  }

  TEST_CASE("schema: defaults, rules and cross-field checks name the field") {
    const OneBitLambOptions d = OneBitLambOptions::schema().read(Json::object(), "optimizer");
    CHECK(d.lr == 1e-3);
    CHECK(d.eps == 1e-8);
    CHECK(d.max_coeff == 10.0);
    CHECK(d.min_coeff == 0.01);
    CHECK(d.coeff_beta == 0.9);
    CHECK(d.factor_max == 4.0);
    CHECK(d.factor_min == 0.5);
    CHECK(d.factor_threshold == 0.1);
    CHECK(d.freeze_step == 100);
    CHECK_FALSE(d.bias_correction);
    CHECK(d.pad_multiple == 0);
    CHECK(d.error_feedback);
    CHECK(d.wire == "fp32");
    CHECK(d.granularity == "flat");  // the reference fuses all momenta in one buffer
    CHECK(d.padding == "reuse");     // the reference's persistent fused buffer
    auto read = [](Json j) { return [j] { OneBitLambOptions::schema().read(j, "optimizer"); }; };
    CHECK(config_error_message(read({{"padding", "ones"}})).find("optimizer.padding = \"ones\"") == 0);
    CHECK(config_error_message(read({{"granularity", "layer"}}))
              .find("optimizer.granularity = \"layer\"") == 0);
    CHECK(config_error_message(read({{"min_coeff", 20}, {"max_coeff", 10}})) ==
          "optimizer.min_coeff = 20.0: must be <= max_coeff (10)");
    CHECK(config_error_message(read({{"factor_min", 5}})) ==
          "optimizer.factor_min = 5.0: must be <= factor_max (4)");
    CHECK(config_error_message(read({{"freeze_step", 0}})) == "optimizer.freeze_step = 0: must be >= 1");
    CHECK(config_error_message(read({{"factor_threshold", 1}})) ==
          "optimizer.factor_threshold = 1: must be in [0, 1)");
    CHECK(config_error_message(read({{"factor_max", 0}})) == "optimizer.factor_max = 0: must be > 0");
    CHECK(config_error_message(read({{"pad_multiple", 12}}))
              .find("optimizer.pad_multiple = 12: must "
                    "be a multiple of 8") == 0);
    CHECK(config_error_message(read({{"wire", "fp8"}})).find("optimizer.wire = \"fp8\"") == 0);
    CHECK(config_error_message(read({{"freeze_stpe", 5}}))
              .find("optimizer.freeze_stpe = 5: unknown key; did you mean \"freeze_step\"?") == 0);
    // The padding multiple must also be a multiple of 8·workers: checked when
    // the cluster is known.
    const std::string msg = config_error_message([] {
      Simulation sim(make_lamb(R"({"steps": 1, "problem": {"name": "mlp"}, "cluster": {"workers": 4},
          "optimizer": {"name": "onebit_lamb", "pad_multiple": 40}})"));
    });
    CHECK(msg.find("optimizer.pad_multiple = 40: must be 0 (the reference's n·lcm(n, 8) = 32) or a "
                   "multiple of 8·workers = 32") == 0);
    // Through the registry, by name.
    CHECK(config_error_message([] {
            make_lamb(R"({"problem": {"name": "mlp"},
                     "optimizer": {"name": "onebit_lamb", "factor_min": 8}})");
          }) == "optimizer.factor_min = 8.0: must be <= factor_max (4)");
  }
}

}  // namespace bitlab
