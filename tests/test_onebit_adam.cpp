// 1-bit Adam / APMSqueeze (docs/algorithms.md §3): the warm-up is Adam bit for bit,
// the compression stage with an exact allreduce is Adam with frozen variance,
// the compression stage with the 1-bit allreduce is the §1 collective driven
// by hand, the byte ratio matches the closed forms, error feedback pays, and
// the options (switch rule, mask, padding) behave and fail as documented.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/onebit_adam.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/comm/comm.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;
using bitlab::testing::random_vector;
using bitlab::testing::config_error_message;

using GivenProblem = testing::FixedProblem;

using testing::GradFn;
// Called after every step with the optimizer (for per-step observations).
using OnebitAdamAfterStep = std::function<void(int64_t step, const Cluster& cluster)>;

// Worker i's gradient at step t: N(0.3, 1) entries, different per worker (a
// common drift, so momenta do not average out to nothing).
void worker_grad(int64_t t, int i, std::span<float> g) {
  fill_normal(RngStream(17, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t)), g,
              1.0f);
  for (float& v : g) v += 0.3f;
}

std::vector<float> run_onebit_adam(Optimizer& opt, const Problem& problem, int workers, int steps,
                       const GradFn& grads, Communicator* comm_out = nullptr,
                       const OnebitAdamAfterStep& after = nullptr) {
  testing::AfterStepFn each = nullptr;
  if (after) each = [&](int64_t t, const Cluster& cluster, Optimizer&) { after(t, cluster); };
  return testing::run_with_gradients(opt, problem, workers, steps, grads, comm_out, each);
}

Experiment make(const Json& j) {
  return resolve_experiment(j, "t");
}

// Everything a Simulation run measures (wall time excluded) and its params.
struct OnebitAdamTrace {
  std::vector<double> values;
  std::vector<std::string> phases;
  std::vector<float> params;
};

OnebitAdamTrace trace(const Experiment& e) {
  Simulation sim(e);
  OnebitAdamTrace t;
  for (int64_t s = 0; s < e.run.steps; ++s) {
    const auto& m = sim.step();
    t.values.push_back(m.train_loss);
    t.values.push_back(m.grad_norm);
    t.values.push_back(m.bytes_sent_cum);
    for (double v : m.eval) t.values.push_back(v);
    t.phases.push_back(m.phase);
  }
  auto x = sim.cluster().params();
  t.params.assign(x.begin(), x.end());
  return t;
}

bool same_values(const OnebitAdamTrace& a, const OnebitAdamTrace& b) {
  return a.values.size() == b.values.size() &&
         std::memcmp(a.values.data(), b.values.data(), a.values.size() * sizeof(double)) == 0 &&
         bit_equal(a.params, b.params);
}

// Final value of eval column `name` after `steps` steps.
double final_eval(const Experiment& e, const std::string& name) {
  Simulation sim(e);
  for (int64_t s = 0; s < e.run.steps; ++s) sim.step();
  const auto cols = sim.eval_columns();
  const auto it = std::find(cols.begin(), cols.end(), name);
  REQUIRE(it != cols.end());
  return sim.evaluate()[static_cast<size_t>(it - cols.begin())];
}

// ---------------------------------------------------------------------------

TEST_SUITE("onebit_adam") {
  TEST_CASE("a warm-up as long as the run is adam without bias correction, bit for bit") {
    // Through Simulation and JSON experiments: losses, gradient norms, bytes,
    // evaluations every 5 steps and the final parameters all match.
    struct Case {
      const char* problem;
      Json onebit;
      Json adam;
    };
    const std::vector<Case> cases = {
        {"logistic",
         {{"name", "onebit_adam"}, {"lr", 0.05}, {"freeze_step", 30}},
         {{"name", "adam"}, {"lr", 0.05}, {"bias_correction", false}}},
        {"mlp",
         {{"name", "onebit_adam"}, {"lr", 0.01}, {"freeze_step", 30}, {"weight_decay", 0.01}},
         {{"name", "adam"}, {"lr", 0.01}, {"bias_correction", false}, {"weight_decay", 0.01}}},
        // wire fp16, and compression "none" with freeze_step >= steps.
        {"mlp",
         {{"name", "onebit_adam"},
          {"lr", 0.01},
          {"freeze_step", 1000},
          {"wire", "fp16"},
          {"compression", "none"}},
         {{"name", "adam"}, {"lr", 0.01}, {"bias_correction", false}, {"wire", "fp16"}}},
        // The warm-up honours bias_correction.
        {"logistic",
         {{"name", "onebit_adam"}, {"lr", 0.05}, {"bias_correction", true}},
         {{"name", "adam"}, {"lr", 0.05}, {"bias_correction", true}}},
        // apmsqueeze whose variance never counts as stable: warm-up to the cap.
        {"logistic",
         {{"name", "apmsqueeze"}, {"lr", 0.05}, {"freeze_step", 30}, {"var_threshold", 1e-12}},
         {{"name", "adam"}, {"lr", 0.05}, {"bias_correction", false}}},
    };
    for (const auto& c : cases) {
      CAPTURE(c.problem);
      CAPTURE(c.onebit.dump());
      Json j = {{"steps", 30},
                {"eval_every", 5},
                {"problem", {{"name", c.problem}}},
                {"cluster", {{"workers", 4}, {"batch_size", 16}}},
                {"optimizer", c.onebit}};
      const OnebitAdamTrace onebit = trace(make(j));
      j["optimizer"] = c.adam;
      const OnebitAdamTrace adam = trace(make(j));
      CHECK(same_values(onebit, adam));
      for (const auto& p : onebit.phases) CHECK(p == "warmup");
    }
  }

  TEST_CASE("compression none: the compression stage is Adam with frozen variance") {
    // Independent reference in double: warm-up Adam (no bias correction) on
    // ḡ, v* = v after step T_w, then m = β1 m + (1−β1) ḡ ;
    // x −= lr·(m/(sqrt(v*)+ε) + wd·x). The optimizer instead forms each
    // m_i = β1 m + (1−β1) g_i in float and averages the m_i: equal in real
    // arithmetic (the mean is linear), different only in float rounding.
    // Tolerance: per step, m carries a few float roundings (≤ ~1e-7 relative
    // to max(|m|, |g|) ≈ 3); divided by sqrt(v*)+ε ≥ sqrt(0.001·T_w)·|g|-ish
    // this is ≲ 1e-5 in the update direction, times lr = 0.01, over 25 steps:
    // ≲ 3e-6 in x, inside 1e-5·max(1, |x|) (observed 5.6e-7), while a v that
    // keeps moving after T_w changes x by more than 1e-3 (checked below).
    const size_t d = 300;
    const int n = 4, steps = 25, freeze = 8;
    const auto x0 = random_vector(d, 5, 1.0f);
    GivenProblem problem(x0);
    OneBitAdamOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.01;
    o.freeze_step = freeze;
    o.compression = "none";
    OneBitAdam opt(o);
    Communicator comm(n);
    const auto x = run_onebit_adam(opt, problem, n, steps, worker_grad, &comm);
    CHECK(opt.compressed());
    CHECK(opt.switch_step() == freeze);
    CHECK(opt.allreduce() == nullptr);

    const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = 0.01, wd = 0.01;
    // keep_v: v keeps moving after T_w (the test must tell that apart).
    auto reference = [&](bool keep_v, std::vector<double>* v_out) {
      std::vector<double> xd(x0.begin(), x0.end()), m(d, 0.0), v(d, 0.0), gbar(d);
      std::vector<float> gi(d);
      for (int t = 1; t <= steps; ++t) {
        std::fill(gbar.begin(), gbar.end(), 0.0);
        for (int i = 0; i < n; ++i) {
          worker_grad(t, i, gi);
          for (size_t k = 0; k < d; ++k) gbar[k] += gi[k] / static_cast<double>(n);
        }
        for (size_t k = 0; k < d; ++k) {
          m[k] = b1 * m[k] + (1 - b1) * gbar[k];
          if (t <= freeze || keep_v) v[k] = b2 * v[k] + (1 - b2) * gbar[k] * gbar[k];
          xd[k] -= lr * (m[k] / (std::sqrt(v[k]) + eps) + wd * xd[k]);
        }
      }
      if (v_out) *v_out = v;
      return xd;
    };
    std::vector<double> v;
    const auto xd = reference(false, &v);
    const auto x_moving_v = reference(true, nullptr);
    double worst = 0.0, moving = 0.0;
    for (size_t k = 0; k < d; ++k) {
      CAPTURE(k);
      const double scale = std::max(1.0, std::abs(xd[k]));
      const double err = std::abs(static_cast<double>(x[k]) - xd[k]);
      worst = std::max(worst, err / scale);
      moving = std::max(moving, std::abs(static_cast<double>(x[k]) - x_moving_v[k]) / scale);
      CHECK(err <= 1e-5 * scale);
      CHECK(static_cast<double>(opt.v()[k]) ==
            doctest::Approx(v[k]).epsilon(1e-5));  // v frozen at v_{T_w}
    }
    CHECK(moving > 1e-3);  // the tolerance separates frozen from moving v
    MESSAGE("compression none vs double reference: worst relative error in x "
            << worst << " (a v that keeps moving: " << moving << ")");
    // Bytes: warm-up steps allreduce gradients, compression steps momenta;
    // both fp32 ring allreduces of d floats, one per step.
    REQUIRE(comm.log().size() == static_cast<size_t>(steps));
    for (const auto& r : comm.log().records()) {
      CHECK(std::string(r.op) == "allreduce");
      CHECK(r.payload_bytes == static_cast<int64_t>(4 * d));
    }
  }

  TEST_CASE("bias correction on: the uncompressed twin's step does not jump at the switch") {
    // docs/algorithms.md §3, departure D24. With bias_correction on, the
    // warm-up steps by m̂ ⊘ (sqrt(v̂)+ε); a compression stage dividing by the
    // uncorrected v* would step (1−β1^T_w)/sqrt(1−β2^T_w) times larger at the
    // switch: 6.2x at T_w = 20, 3.2x at T_w = 100. The twin
    // (compression "none": exact momenta, frozen variance) must step on as
    // the warm-up did. Measured: ‖x_t − x_{t−1}‖ over d = 4000 coordinates,
    // gradients N(0.3, 1) per worker. Bound: the switch step's ratio to the
    // step before lies in [0.8, 1.25]. Between two warm-up steps the ratio
    // moves by the EMA's share of fresh noise (about 1/(T_w)+0.1·noise), a
    // few per cent; the old behaviour's 3.2x and 6.2x lie far outside. (On the
    // old code, where the compression stage ignored the correction, this
    // test fails with ratios 6.2 and 3.2.)
    const size_t d = 4000;
    const int n = 4;
    for (const int freeze : {20, 100}) {
      CAPTURE(freeze);
      const auto x0 = random_vector(d, 5, 1.0f);
      GivenProblem problem(x0);
      OneBitAdamOptions o;
      o.lr = 1e-3;
      o.bias_correction = true;
      o.freeze_step = freeze;
      o.compression = "none";
      OneBitAdam opt(o);
      std::vector<float> prev(x0);
      std::vector<double> step_norm(static_cast<size_t>(freeze) + 3, 0.0);
      run_onebit_adam(opt, problem, n, freeze + 2, worker_grad, nullptr,
          [&](int64_t t, const Cluster& cluster) {
            const auto x = cluster.params();
            double ss = 0.0;
            for (size_t k = 0; k < d; ++k) {
              const double dx = static_cast<double>(x[k]) - prev[k];
              ss += dx * dx;
            }
            step_norm[static_cast<size_t>(t)] = std::sqrt(ss);
            std::copy(x.begin(), x.end(), prev.begin());
          });
      const double warmup_ratio = step_norm[freeze] / step_norm[freeze - 1];
      const double switch_ratio = step_norm[freeze + 1] / step_norm[freeze];
      MESSAGE("T_w = " << freeze << ": step ratio across the switch " << switch_ratio
                       << " (between the last two warm-up steps " << warmup_ratio << ")");
      CHECK(warmup_ratio >= 0.8);
      CHECK(warmup_ratio <= 1.25);
      CHECK(switch_ratio >= 0.8);
      CHECK(switch_ratio <= 1.25);
    }
  }

  TEST_CASE("onebit compression stage: the §1 allreduce of the momenta, step by step") {
    // The same run written against the building blocks (bit for bit): the
    // warm-up as adam_update_elements on the fp32 mean, then per step the
    // local momenta, a fresh OneBitAllreduce (zero errors at the switch) and
    // the uncorrected Adam direction with v frozen.
    const size_t d = 1000;
    const int n = 4, steps = 15, freeze = 5;
    const auto x0 = random_vector(d, 9, 1.0f);
    GivenProblem problem(x0);
    OneBitAdamOptions o;
    o.lr = 0.02;
    o.weight_decay = 0.01;
    o.freeze_step = freeze;
    OneBitAdam opt(o);
    Communicator comm(n);
    std::vector<float> v_at_switch;
    const auto x = run_onebit_adam(opt, problem, n, steps, worker_grad, &comm, [&](int64_t t, const Cluster&) {
      CHECK(std::string(opt.phase()) == (t <= freeze ? "warmup" : "compressed"));
      if (t == freeze) {
        v_at_switch.assign(opt.v().begin(), opt.v().end());
        // Errors are zero at the switch.
        for (int i = 0; i < n; ++i) {
          for (float e : opt.allreduce()->part(0).worker_error(i)) CHECK(e == 0.0f);
        }
      }
    });
    CHECK(bit_equal(opt.v(), v_at_switch));

    const size_t stride = 1008;  // any stride: WorkerBuffers allow it
    std::vector<float> xr = x0, m(d, 0.0f), v(d, 0.0f), g(n * stride, 0.0f), gbar(d);
    std::vector<float> mi(n * stride, 0.0f);
    OneBitAllreduce ref(n, d);
    Communicator ref_comm(n);
    for (int64_t t = 1; t <= steps; ++t) {
      for (int i = 0; i < n; ++i) worker_grad(t, i, {g.data() + i * stride, d});
      const WorkerBuffers gb{g.data(), stride, d, n};
      const AdamCoeffs c = make_adam_coeffs(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                            /*bias_correction=*/false, t);
      if (t <= freeze) {
        mean_over_workers(gb, gbar, WireDtype::kFp32);
        adam_update_elements(xr, m, v, gbar, c);
        continue;
      }
      for (int i = 0; i < n; ++i) {
        for (size_t k = 0; k < d; ++k) {
          mi[i * stride + k] = c.beta1 * m[k] + c.one_minus_beta1 * g[i * stride + k];
        }
      }
      ref_comm.begin_step(t);
      ref.run(ref_comm, {mi.data(), stride, d, n}, m);
      for (size_t k = 0; k < d; ++k) {
        xr[k] -= c.lr * (m[k] / (std::sqrt(v[k]) + c.eps) + c.weight_decay * xr[k]);
      }
    }
    CHECK(bit_equal(x, xr));
    CHECK(bit_equal(opt.m(), m));
    // Log: one allreduce per warm-up step, then four collectives per step.
    const auto& recs = comm.log().records();
    REQUIRE(recs.size() == static_cast<size_t>(freeze + 4 * (steps - freeze)));
    for (size_t k = 0; k < recs.size(); ++k) {
      CAPTURE(k);
      const std::string op = recs[k].op;
      if (k < static_cast<size_t>(freeze)) {
        CHECK(op == "allreduce");
      } else {
        CHECK(op == ((k - freeze) % 4 == 0 ? "alltoall" : "allgather"));
      }
    }
  }

  TEST_CASE(
      "granularity: group is flat bit for bit; tensor keeps a 1000x smaller tensor's signal") {
    // Two tensors of 500; the first's gradients are 1000× the second's. The
    // gradients do not depend on x, so "compression none" gives the exact
    // synchronised momentum to compare with.
    const size_t half = 500, d = 2 * half;
    const int n = 4, steps = 12, freeze = 4;
    GivenProblem problem(random_vector(d, 21, 1.0f), {{"big", 0, half}, {"small", half, half}});
    const GradFn grads = [&](int64_t t, int i, std::span<float> g) {
      worker_grad(t, i, g);
      for (size_t k = 0; k < half; ++k) g[k] *= 1000.0f;
    };
    auto momentum = [&](const std::string& granularity, const std::string& compression,
                        Communicator& comm) {
      OneBitAdamOptions o;
      o.freeze_step = freeze;
      o.granularity = granularity;
      o.compression = compression;
      OneBitAdam opt(o);
      const auto x = run_onebit_adam(opt, problem, n, steps, grads, &comm);
      std::vector<float> m(opt.m().begin(), opt.m().end());
      m.insert(m.end(), x.begin(), x.end());  // momentum, then parameters
      return m;
    };
    Communicator c_exact(n), c_flat(n), c_group(n), c_tensor(n);
    const auto exact = momentum("group", "none", c_exact);
    const auto flat = momentum("flat", "onebit", c_flat);
    const auto group = momentum("group", "onebit", c_group);
    const auto tensor = momentum("tensor", "onebit", c_tensor);
    CHECK(bit_equal(flat, group));  // bitlab's problems are one parameter group
    CHECK_FALSE(bit_equal(flat, tensor));
    auto rel = [&](const std::vector<float>& m) {
      double num = 0, den = 0;
      for (size_t k = half; k < d; ++k) {
        num += (double{m[k]} - exact[k]) * (double{m[k]} - exact[k]);
        den += double{exact[k]} * exact[k];
      }
      return std::sqrt(num / den);
    };
    MESSAGE("small tensor's momentum, relative error: group ", rel(group), ", tensor ",
            rel(tensor));
    // Per tensor the small momentum is ±(its own scale): a relative error
    // below 1 (sign compression of N(0.3·(1−β1^k)…, ·) values errs by
    // ~0.6 of the norm). One flat scale is set by the big tensor (1000×): the
    // small one's entries come out hundreds of times too large.
    CHECK(rel(tensor) < 1.0);
    CHECK(rel(group) > 50.0);
    // Four collectives per tensor per compressed step.
    CHECK(c_group.log().size() == static_cast<size_t>(freeze + 4 * (steps - freeze)));
    CHECK(c_tensor.log().size() == static_cast<size_t>(freeze + 8 * (steps - freeze)));
  }

  TEST_CASE("bytes: total relative to fp16 Adam is 1/(w + (1−w)·r)") {
    // n = 16, T = 200, T_w = 30 (w = 0.15). Logistic with dim 250: d = 251
    // parameters, D = 256 (the reference pads to n·lcm(n, 8) = 256).
    const int n = 16;
    const int64_t steps = 200, freeze = 30;
    const double w = static_cast<double>(freeze) / static_cast<double>(steps);
    const double d = 251.0, D = 256.0;
    const double fp16_step = 2.0 * (n - 1) / n * 2.0 * d;                // ring, 2 bytes
    const double onebit_step = (n - 1) * D / (4.0 * n) + 8.0 * (n - 1);  // docs/algorithms.md §1
    const double r = onebit_step / fp16_step;
    auto total_bytes = [&](const Json& opt) {
      Json j = {{"steps", steps},
                {"grad_norm_every", 0},
                {"problem", {{"name", "logistic"}, {"dim", 250}}},
                {"cluster", {{"workers", n}, {"batch_size", 4}}},
                {"optimizer", opt}};
      Simulation sim(make(j));
      double last = 0.0;
      for (int64_t s = 1; s <= steps; ++s) {
        const auto& m = sim.step();
        // Per step: the warm-up's gradient allreduce, then the 1-bit call.
        if (std::string(m.phase) == "compressed") CHECK(m.bytes_sent == onebit_step);
        last = m.bytes_sent_cum;
      }
      return last;
    };
    const double adam16 = total_bytes({{"name", "adam"}, {"wire", "fp16"}});
    CHECK(adam16 == doctest::Approx(steps * fp16_step).epsilon(1e-12));
    SUBCASE("fp16 warm-up") {
      const double ob = total_bytes(
          {{"name", "onebit_adam"}, {"freeze_step", freeze}, {"wire", "fp16"}, {"lr", 0.01}});
      const double expected = 1.0 / (w + (1.0 - w) * r);
      MESSAGE("r = " << r << ", adam fp16 / onebit_adam bytes = " << adam16 / ob << " (closed form "
                     << expected << ")");
      CHECK(std::abs(adam16 / ob - expected) <= 1e-12 * expected);
    }
    SUBCASE("fp32 warm-up (the default): the warm-up costs twice an fp16 step") {
      const double ob =
          total_bytes({{"name", "onebit_adam"}, {"freeze_step", freeze}, {"lr", 0.01}});
      const double expected = 1.0 / (2.0 * w + (1.0 - w) * r);
      MESSAGE("fp32 warm-up: adam fp16 / onebit_adam bytes = " << adam16 / ob);
      CHECK(std::abs(adam16 / ob - expected) <= 1e-12 * expected);
    }
  }

  TEST_CASE("error feedback off ends measurably worse than on") {
    // Logistic regression (dim 20), n = 16, batch 16, T = 200, warm-up 30
    // (15 %), lr 0.003: the full training loss after the run with and without
    // the error compensation, and exact Adam (no bias correction) for scale.
    // Observed (seeds 0, 1, 2): on 0.3139-0.3142, off 0.3928-0.3932, adam
    // 0.3131: error feedback recovers Adam's loss (the 1-bit Adam paper's
    // claim) and without it the run is 0.079 behind. The gap is a convergence
    // SPEED gap: it shrinks with a larger lr or a longer run (lr 0.005, T = 300:
    // 0.019; dim 100, lr 0.01: 0.0045) and at lr 0.03 (dim 100), where every
    // variant sits at its noise floor, off was 0.0016 better than on. Without
    // the errors the synchronised momentum is c·sign(·) and a coordinate's sign
    // only flips once (1−β1)·|ḡ| outweighs β1·c, so small coordinates lag.
    auto loss = [](const Json& opt) {
      Json j = {{"steps", 200},
                {"grad_norm_every", 0},
                {"problem", {{"name", "logistic"}, {"dim", 20}}},
                {"cluster", {{"workers", 16}, {"batch_size", 16}}},
                {"optimizer", opt}};
      return final_eval(make(j), "train_loss_full");
    };
    const Json onebit = {{"name", "onebit_adam"}, {"lr", 0.003}, {"freeze_step", 30}};
    Json no_ef = onebit;
    no_ef["error_feedback"] = false;
    const double on = loss(onebit), off = loss(no_ef);
    const double adam = loss({{"name", "adam"}, {"lr", 0.003}, {"bias_correction", false}});
    MESSAGE("train_loss_full: error feedback on " << on << ", off " << off << ", adam " << adam);
    CHECK(on < off - 0.05);
    CHECK(std::abs(on - adam) < 0.005);
  }

  TEST_CASE("phases, shared parameters, freeze_step 0") {
    const Json j = {{"steps", 12},
                    {"problem", {{"name", "logistic"}}},
                    {"cluster", {{"workers", 4}, {"batch_size", 16}}},
                    {"optimizer", {{"name", "onebit_adam"}, {"lr", 0.05}, {"freeze_step", 7}}}};
    Simulation sim(make(j));
    auto& opt = dynamic_cast<OneBitAdam&>(sim.optimizer());
    CHECK(std::string(opt.phase()) == "warmup");
    for (int t = 1; t <= 12; ++t) {
      CAPTURE(t);
      const auto& m = sim.step();
      CHECK(std::string(m.phase) == (t <= 7 ? "warmup" : "compressed"));
      CHECK(opt.switch_step() == (t < 7 ? -1 : 7));
      // One set of parameters: every worker computes at cluster.params().
      CHECK_FALSE(sim.cluster().has_local_params());
    }
    Json z = j;
    z["optimizer"]["freeze_step"] = 0;
    Simulation sim0(make(z));
    CHECK(std::string(sim0.optimizer().phase()) == "compressed");
    CHECK(std::string(sim0.step().phase) == "compressed");
  }

  TEST_CASE("variance_stable: switches at the first stable step, never after freeze_step") {
    const size_t d = 200;
    const int n = 4;
    GivenProblem problem(random_vector(d, 3, 1.0f));
    auto run_apm = [&](double threshold, int64_t min_warmup, int64_t freeze,
                       std::vector<double>* rho) {
      ApmSqueezeOptions o;
      o.freeze_step = freeze;
      o.min_warmup = min_warmup;
      o.var_threshold = threshold;
      CHECK(o.switch_rule == "variance_stable");
      OneBitAdam opt(o);
      std::vector<float> v_prev(d, 0.0f);
      run_onebit_adam(opt, problem, n, static_cast<int>(freeze) + 5, worker_grad, nullptr,
          [&](int64_t t, const Cluster&) {
            if (!rho || t > static_cast<int64_t>(rho->size()) + 1) return;
            if (std::string(opt.phase()) != "warmup") return;
            // ρ_t from the test's own copy of v: ‖v_t − v_{t−1}‖/‖v_t‖.
            double num = 0, den = 0;
            for (size_t k = 0; k < d; ++k) {
              const double dv = static_cast<double>(opt.v()[k]) - v_prev[k];
              num += dv * dv;
              den += static_cast<double>(opt.v()[k]) * opt.v()[k];
            }
            rho->push_back(std::sqrt(num / den));
            CHECK(opt.last_var_change() == doctest::Approx(rho->back()).epsilon(1e-12));
            std::copy(opt.v().begin(), opt.v().end(), v_prev.begin());
          });
      return opt.switch_step();
    };
    // Any ρ is below a huge threshold: the switch comes at min_warmup.
    CHECK(run_apm(1e9, 10, 60, nullptr) == 10);
    // No ρ is below a tiny one: the switch comes at the cap, freeze_step.
    CHECK(run_apm(1e-12, 10, 60, nullptr) == 60);
    // min_warmup beyond freeze_step: the cap wins.
    CHECK(run_apm(1e9, 80, 60, nullptr) == 60);
    // In between: the first t >= min_warmup with ρ_t < threshold.
    std::vector<double> rho;
    const int64_t sw = run_apm(0.05, 5, 60, &rho);
    int64_t expected = 60;
    for (size_t k = 4; k < rho.size(); ++k) {
      if (rho[k] < 0.05) {
        expected = static_cast<int64_t>(k) + 1;
        break;
      }
    }
    MESSAGE("variance_stable with threshold 0.05: switch after step " << sw << ", ρ there "
                                                                      << rho[sw - 1]);
    CHECK(sw == expected);
    CHECK(sw < 60);
    CHECK(rho.size() == static_cast<size_t>(sw));
  }

  TEST_CASE("momentum mask zeroes the masked coordinates of m") {
    const size_t d = 64;
    const int n = 4, steps = 12, freeze = 4;
    const auto x0 = random_vector(d, 21, 1.0f);
    GivenProblem problem(x0);
    OneBitAdamOptions o;
    o.lr = 0.01;
    o.freeze_step = freeze;
    o.momentum_mask.assign(d, 1.0);
    for (size_t k = 0; k < d; k += 3) o.momentum_mask[k] = 0.0;
    OneBitAdam opt(o);
    std::vector<float> x_at_switch;
    const auto x =
        run_onebit_adam(opt, problem, n, steps, worker_grad, nullptr, [&](int64_t t, const Cluster& c) {
          if (t == freeze) x_at_switch.assign(c.params().begin(), c.params().end());
          if (t <= freeze) return;
          for (size_t k = 0; k < d; ++k) {
            CAPTURE(k);
            if (k % 3 == 0) {
              CHECK(opt.m()[k] == 0.0f);
            } else {
              CHECK(opt.m()[k] != 0.0f);
            }
          }
        });
    // With wd = 0 the masked coordinates do not move after the switch.
    for (size_t k = 0; k < d; ++k) {
      CAPTURE(k);
      if (k % 3 == 0) {
        CHECK(x[k] == x_at_switch[k]);
      } else {
        CHECK(x[k] != x_at_switch[k]);
      }
    }
  }

  TEST_CASE("1 and 2 OpenMP threads give bit-identical compression stages") {
    const size_t d = 70000;
    const int n = 3;
    GivenProblem problem(random_vector(d, 4, 0.3f));
    const int saved = omp_get_max_threads();
    std::vector<std::vector<float>> results;
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      OneBitAdamOptions o;
      o.freeze_step = 2;
      o.weight_decay = 0.02;
      o.momentum_mask.assign(d, 1.0);
      o.momentum_mask[5] = 0.0;
      OneBitAdam opt(o);
      results.push_back(run_onebit_adam(opt, problem, n, 6, worker_grad));
    }
    omp_set_num_threads(saved);
    CHECK(bit_equal(results[0], results[1]));
  }

  TEST_CASE("options: defaults of both names, rules and messages") {
    const auto& reg = optimizer_registry();
    const auto* ob = find_entry(reg, "onebit_adam");
    const auto* apm = find_entry(reg, "apmsqueeze");
    REQUIRE(ob != nullptr);
    REQUIRE(apm != nullptr);
    const Json a = ob->resolve({{"name", "onebit_adam"}}, "optimizer");
    const Json b = apm->resolve({{"name", "apmsqueeze"}}, "optimizer");
    CHECK(a["switch"] == "fixed_step");
    CHECK(b["switch"] == "variance_stable");
    for (const Json* r : {&a, &b}) {
      CHECK((*r)["lr"] == 1e-3);
      CHECK((*r)["beta1"] == 0.9);
      CHECK((*r)["beta2"] == 0.999);
      CHECK((*r)["eps"] == 1e-8);
      CHECK((*r)["weight_decay"] == 0.0);
      CHECK((*r)["bias_correction"] == false);
      CHECK((*r)["freeze_step"] == 100);
      CHECK((*r)["var_threshold"] == 0.01);
      CHECK((*r)["min_warmup"] == 10);
      CHECK((*r)["error_feedback"] == true);
      CHECK((*r)["pad_multiple"] == 0);
      CHECK((*r)["momentum_mask"] == Json::array());
      CHECK((*r)["compression"] == "onebit");
      CHECK((*r)["wire"] == "fp32");
    }
    CHECK(std::string(ob->make(a)->phase()) == "warmup");
    // apmsqueeze can be switched to the fixed rule and vice versa.
    CHECK(apm->resolve({{"name", "apmsqueeze"}, {"switch", "fixed_step"}}, "o")["switch"] ==
          "fixed_step");
    for (const auto& f : ob->fields) {
      CAPTURE(f.name);
      CHECK_FALSE(f.doc.empty());
    }

    auto err = [&](Json raw) {
      return config_error_message([&] {
        raw["name"] = "onebit_adam";
        ob->resolve(raw, "optimizer");
      });
    };
    CHECK(err({{"freeze_step", -3}}) == "optimizer.freeze_step = -3: must be >= 0");
    CHECK(err({{"switch", "sometimes"}})
              .find("optimizer.switch = \"sometimes\": must be one of \"fixed_step\", "
                    "\"variance_stable\"") == 0);
    CHECK(err({{"compression", "topk"}}).find("optimizer.compression = \"topk\": must be one of") ==
          0);
    CHECK(err({{"var_threshold", 0}}) == "optimizer.var_threshold = 0: must be > 0");
    CHECK(err({{"min_warmup", 0}}) == "optimizer.min_warmup = 0: must be >= 1");
    CHECK(err({{"pad_multiple", -8}}) == "optimizer.pad_multiple = -8: must be >= 0");
    CHECK(err({{"momentum_mask", {1, 0, 0.5}}}) ==
          "optimizer.momentum_mask.2 = 0.5: must be 0 or 1");
    CHECK(err({{"momentum_mask", "all"}}) ==
          "optimizer.momentum_mask = \"all\": must be a list of numbers");
    CHECK(err({{"wire", "fp8"}}).find("optimizer.wire = \"fp8\": must be one of") == 0);
    CHECK(err({{"freez_step", 3}})
              .find("optimizer.freez_step = 3: unknown key; did you mean "
                    "\"freeze_step\"?") == 0);

    // Checks that need the cluster, at setup (Simulation construction).
    const Json base = {{"steps", 3},
                       {"problem", {{"name", "logistic"}, {"dim", 20}}},
                       {"cluster", {{"workers", 4}}},
                       {"optimizer", {{"name", "onebit_adam"}}}};
    Json bad = base;
    bad["optimizer"]["pad_multiple"] = 20;
    CHECK(config_error_message([&] { Simulation sim(make(bad)); }) ==
          "optimizer.pad_multiple = 20: must be 0 (the reference's n·lcm(n, 8) = 32) or a "
          "multiple of 8·workers = 32");
    bad["optimizer"]["pad_multiple"] = 64;
    CHECK_NOTHROW(Simulation(make(bad)));
    bad = base;
    bad["optimizer"]["momentum_mask"] = {1, 0, 1};
    CHECK(config_error_message([&] { Simulation sim(make(bad)); }) ==
          "optimizer.momentum_mask = [1.0,0.0,1.0]: must have one value per parameter: 21 "
          "values, got 3");
  }
}

}  // namespace
}  // namespace bitlab
