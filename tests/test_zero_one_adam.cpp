// 0/1 Adam (optimizers/zero_one_adam.hpp, docs/algorithms.md §5): the schedule
// against an independent count, interval 1 = Adam, per-worker parameters at
// and between syncs, the error reset at the transition, the lrs guard, thread
// invariance and the bytes of every phase.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/optimizer.hpp"
#include "optimizers/zero_one_adam.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;
using bitlab::testing::random_vector;

using testing::FixedProblem;

// N(0, 1) gradient of worker i at step t, different on every worker.
void random_grad(int64_t t, int i, std::span<float> g) {
  fill_normal(RngStream(7, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t)), g,
              1.0f);
}

std::vector<float> copy_of(std::span<const float> x) {
  return {x.begin(), x.end()};
}

// Drives an optimizer on a Cluster of FixedProblem with random_grad, calling
// `after(t)` after every step.
struct Driver {
  Driver(const Problem& problem, int workers)
      : cluster(options(workers), problem, /*seed=*/1), comm(workers) {}
  static ClusterOptions options(int workers) {
    ClusterOptions co;
    co.workers = workers;
    return co;
  }
  void run(Optimizer& opt, int64_t steps, const std::function<void(int64_t)>& after = nullptr) {
    opt.setup(cluster);
    for (int64_t t = 1; t <= steps; ++t) {
      for (int i = 0; i < cluster.workers(); ++i) random_grad(t, i, cluster.grad(i));
      comm.begin_step(t);
      StepContext ctx{t, cluster, comm};
      opt.finish_step(ctx);
      if (after) after(t);
    }
  }
  Cluster cluster;
  Communicator comm;
};

Experiment make(const std::string& text) {
  return resolve_experiment(Json::parse(text), "t");
}

ZeroOneAdam& zero_one(Simulation& sim) {
  return dynamic_cast<ZeroOneAdam&>(sim.optimizer());
}

// ---------------------------------------------------------------------------

TEST_SUITE("zero_one_adam") {
  TEST_CASE("schedule: phase counts over 10000 steps equal an independent count") {
    const int64_t kSteps = 10000, kFreeze = 1000, kKappa = 16, kScaler = 1000, kClip = 16;
    // §5's schedule written out again, independently of ZeroOneSchedule.
    int64_t want_full = 0, want_onebit = 0, want_sync = 0, want_local = 0;
    std::vector<int64_t> want_full_steps;
    {
      int64_t var_interval = 1, var_counter = 0, local_interval = 1, local_counter = 0;
      for (int64_t t = 1; t <= kSteps; ++t) {
        if (t <= kFreeze) {
          if (t % var_interval == 0) {
            ++want_full;
            want_full_steps.push_back(t);
            if (++var_counter == kKappa) {
              var_counter = 0;
              var_interval *= 2;
            }
          } else {
            ++want_onebit;
          }
        } else {
          if (t % local_interval == 0) {
            ++want_sync;
          } else {
            ++want_local;
          }
          if (++local_counter == kScaler) {
            local_counter = 0;
            local_interval = std::min(kClip, 2 * local_interval);
          }
        }
      }
    }
    // And by hand: full steps 1..16, 18..48, 52..112, 120..240, 256..496,
    // 512..992 (16 each); syncs: 1000 at interval 1, 500 at 2, 250 at 4, 125
    // at 8, then the multiples of 16 in 5001..10000: 313.
    CHECK(want_full == 96);
    CHECK(want_onebit == 904);
    CHECK(want_sync == 2188);
    CHECK(want_local == 6812);

    // The optimizer, on a tiny problem, read through phase() every step.
    Simulation sim(make(R"({"steps": 10000, "grad_norm_every": 0,
        "problem": {"name": "quadratic", "dim": 4, "noise": 0.1},
        "cluster": {"workers": 2},
        "optimizer": {"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 1000,
                      "var_update_scaler": 16, "local_step_scaler": 1000,
                      "local_step_clipper": 16}})"));
    int64_t full = 0, onebit = 0, sync = 0, local = 0;
    std::vector<int64_t> full_steps;
    for (int64_t t = 1; t <= kSteps; ++t) {
      const std::string phase = sim.step().phase;
      if (phase == "full") {
        ++full;
        full_steps.push_back(t);
      } else if (phase == "onebit") {
        ++onebit;
      } else if (phase == "sync") {
        ++sync;
      } else if (phase == "local") {
        ++local;
      } else {
        FAIL("unknown phase " << phase);
      }
    }
    CHECK(full == want_full);
    CHECK(onebit == want_onebit);
    CHECK(sync == want_sync);
    CHECK(local == want_local);
    CHECK(full_steps == want_full_steps);
    // The first variance updates: 1..16 at interval 1, then 18, 20, …, 48,
    // then 52 (multiples of the interval).
    std::vector<int64_t> first;
    for (int64_t t = 1; t <= 16; ++t) first.push_back(t);
    for (int64_t t = 18; t <= 48; t += 2) first.push_back(t);
    first.push_back(52);
    REQUIRE(full_steps.size() >= first.size());
    CHECK(std::vector<int64_t>(full_steps.begin(), full_steps.begin() + 33) == first);
    CHECK(zero_one(sim).schedule().local_interval() == 16);
    CHECK(zero_one(sim).schedule().var_interval() == 64);
  }

  TEST_CASE("schedule: ZeroOneSchedule alone gives the optimizer's phases") {
    ZeroOneAdamOptions o;
    o.var_freeze_step = 37;
    o.var_update_scaler = 3;
    o.local_step_scaler = 5;
    o.local_step_clipper = 4;
    FixedProblem problem(random_vector(40, 1, 1.0f));
    Driver drv(problem, 3);
    ZeroOneAdam opt(o);
    ZeroOneSchedule sched(o);
    std::vector<std::string> got, want;
    drv.run(opt, 120, [&](int64_t) {
      got.emplace_back(opt.phase());
      want.emplace_back(zero_one_phase_name(sched.next()));
    });
    CHECK(got == want);
    // Counters start at var_interval 1, local_interval 1, counters 0.
    const ZeroOneSchedule fresh(o);
    CHECK(fresh.var_interval() == 1);
    CHECK(fresh.var_counter() == 0);
    CHECK(fresh.local_interval() == 1);
    CHECK(fresh.local_counter() == 0);
    CHECK(fresh.step() == 0);
  }

  TEST_CASE("interval 1 throughout stage A is Adam without bias correction, bit for bit") {
    const size_t d = 1000;
    const int n = 3;
    const int64_t steps = 30;
    FixedProblem problem(random_vector(d, 3, 1.0f));
    for (const double wd : {0.0, 0.01}) {
      CAPTURE(wd);
      AdamOptions ao;
      ao.lr = 0.01;
      ao.weight_decay = wd;
      ao.bias_correction = false;
      Adam adam(ao);
      Driver a(problem, n);
      a.run(adam, steps);

      ZeroOneAdamOptions zo;
      zo.lr = 0.01;
      zo.weight_decay = wd;
      zo.var_freeze_step = steps;               // never leaves stage A
      zo.var_update_scaler = int64_t{1} << 40;  // the interval stays 1
      ZeroOneAdam zoa(zo);
      Driver z(problem, n);
      bool all_full = true;
      z.run(zoa, steps,
            [&](int64_t) { all_full = all_full && zoa.last_phase() == ZeroOnePhase::kFull; });
      CHECK(all_full);
      CHECK(bit_equal(z.cluster.params(), a.cluster.params()));
      CHECK(bit_equal(zoa.m(), adam.m()));
      CHECK(bit_equal(zoa.v(), adam.v()));
      for (int i = 0; i < n; ++i) CHECK(bit_equal(z.cluster.params(i), a.cluster.params()));
      // Same bytes: one fp32 ring allreduce of d floats per step.
      CHECK(z.comm.log().size() == a.comm.log().size());
    }
  }

  TEST_CASE("workers: bit-identical after every sync, apart between syncs") {
    // Per-worker gradient noise: the workers' gradients differ.
    const Experiment e = make(R"({"steps": 80, "grad_norm_every": 0,
        "problem": {"name": "quadratic", "dim": 50, "noise": 0.5},
        "cluster": {"workers": 4},
        "optimizer": {"name": "zero_one_adam", "lr": 0.01, "weight_decay": 0.01,
                      "var_freeze_step": 10, "var_update_scaler": 2,
                      "local_step_scaler": 3, "local_step_clipper": 4}})");
    Simulation sim = testing::simulation_with_rows(e);  // reads every worker's gradient
    Cluster& cl = sim.cluster();
    ZeroOneAdam& opt = zero_one(sim);
    const int n = cl.workers();
    const double lr = 0.01;
    std::vector<float> x_sync = copy_of(cl.params());
    double lrs_want = 0.0;  // the same double sum the optimizer forms
    int syncs = 0, locals = 0, stage_a = 0, apart = 0;
    std::vector<std::vector<float>> x_before(n), m_before(n);
    for (int64_t t = 1; t <= e.run.steps; ++t) {
      CAPTURE(t);
      for (int i = 0; i < n; ++i) {
        x_before[i] = copy_of(cl.params(i));
        m_before[i] = copy_of(opt.m_local(i));
      }
      const std::string phase = sim.step().phase;
      if (phase == "full" || phase == "onebit") {
        ++stage_a;
        for (int i = 0; i < n; ++i) CHECK(bit_equal(cl.params(i), cl.params()));
        x_sync = copy_of(cl.params());
        continue;
      }
      lrs_want += lr;
      if (phase == "local") {
        ++locals;
        // The local step, element by element, from the state before it:
        // m_i = β1 m_i + (1−β1) g_i ; x_i −= lr·(m_i ⊘ (sqrt(v)+ε) + wd·x_i).
        for (int i = 0; i < n; ++i) {
          std::vector<float> m_want = m_before[i], x_want = x_before[i];
          for (size_t k = 0; k < cl.dim(); ++k) {
            m_want[k] = 0.9f * m_want[k] + static_cast<float>(1.0 - 0.9) * cl.grad(i)[k];
            x_want[k] -= 0.01f * (m_want[k] / opt.denom()[k] + 0.01f * x_want[k]);
          }
          CHECK(bit_equal(opt.m_local(i), m_want));
          CHECK(bit_equal(cl.params(i), x_want));
        }
        // The shared copy stays at the last synchronised value …
        CHECK(bit_equal(cl.params(), x_sync));
        // … and u_i = x_i − x_sync up to rounding (u accumulates −δ): a few
        // float roundings of x, i.e. ~1e-7·|x|, per local step.
        double worst = 0.0;
        for (int i = 0; i < n; ++i) {
          for (size_t k = 0; k < cl.dim(); ++k) {
            const double diff = static_cast<double>(cl.params(i)[k]) - x_sync[k];
            worst = std::max(worst, std::abs(opt.u(i)[k] - diff) /
                                        std::max(1.0, std::abs(static_cast<double>(x_sync[k]))));
          }
        }
        CHECK(worst < 1e-5);
        bool differ = false;
        for (int i = 1; i < n; ++i) differ = differ || !bit_equal(cl.params(i), cl.params(0));
        apart += differ;
        CHECK(opt.lrs() == lrs_want);
        continue;
      }
      REQUIRE(phase == "sync");
      ++syncs;
      // x = x_sync + ū ⊘ (sqrt(v)+ε), from exactly the saved value, on every
      // worker and the shared copy; m_i = −ū/lrs; u = 0; lrs = 0.
      const auto ub = opt.last_sync_mean();
      const auto den = opt.denom();
      std::vector<float> x_want(cl.dim()), m_want(cl.dim());
      for (size_t k = 0; k < cl.dim(); ++k) {
        x_want[k] = x_sync[k] + ub[k] / den[k];
        m_want[k] = static_cast<float>(-static_cast<double>(ub[k]) / lrs_want);
      }
      CHECK(bit_equal(cl.params(), x_want));
      for (int i = 0; i < n; ++i) {
        CHECK(bit_equal(cl.params(i), x_want));
        CHECK(bit_equal(opt.m_local(i), m_want));
        CHECK(std::all_of(opt.u(i).begin(), opt.u(i).end(), [](float v) { return v == 0.0f; }));
      }
      CHECK(opt.lrs() == 0.0);
      x_sync = x_want;
      lrs_want = 0.0;
    }
    CHECK(stage_a == 10);
    CHECK(syncs > 10);
    CHECK(locals > 20);
    CHECK(apart == locals);  // different gradients: apart after every local step
    CHECK(opt.frozen());
  }

  TEST_CASE("the reference's un-step x_i − u_i is not exact in float (why x_sync is restored)") {
    // k local steps from x_sync: x −= δ, u −= δ, in float as the optimizer
    // does. In real arithmetic x − u = x_sync; in float it is not always.
    const size_t d = 4096;
    const std::vector<float> x_sync = random_vector(d, 21, 1.0f);
    std::vector<float> x = x_sync, u(d, 0.0f);
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> delta = random_vector(d, 100 + step, 1e-3f);
      for (size_t k = 0; k < d; ++k) {
        x[k] -= delta[k];
        u[k] -= delta[k];
      }
    }
    size_t inexact = 0;
    for (size_t k = 0; k < d; ++k) {
      inexact += (x[k] - u[k]) != x_sync[k];
      CHECK(x[k] - u[k] == doctest::Approx(x_sync[k]).epsilon(1e-6).scale(1e-6));
    }
    MESSAGE("x − u differs from x_sync in " << inexact << " of " << d << " elements");
    CHECK(inexact > 0);
  }

  TEST_CASE("worker and server errors are zeroed at the transition") {
    // var_update_scaler 2: full steps 1, 2, 4, 6, 8, 12; 1-bit steps 3, 5, 7,
    // 9, 10, 11; step 12 is the last of stage A; 13 is a sync (interval 1).
    const int n = 4;
    FixedProblem problem(random_vector(100, 5, 1.0f));
    ZeroOneAdamOptions o;
    o.lr = 0.01;
    o.var_freeze_step = 12;
    o.var_update_scaler = 2;
    ZeroOneAdam opt(o);
    Driver drv(problem, n);
    auto errors_zero = [&] {
      bool zero = true;
      for (int i = 0; i < n; ++i) {
        for (float v : opt.allreduce().part(0).worker_error(i)) zero = zero && v == 0.0f;
        for (float v : opt.allreduce().part(0).server_error(i)) zero = zero && v == 0.0f;
      }
      return zero;
    };
    std::vector<std::string> phases;
    drv.run(opt, 13, [&](int64_t t) {
      phases.emplace_back(opt.phase());
      if (t == 11) CHECK_FALSE(errors_zero());  // 1-bit steps left errors
      if (t == 12) {
        CHECK(opt.frozen());
        CHECK(errors_zero());
        // m_i = m on every worker; denom = sqrt(v) + ε.
        for (int i = 0; i < n; ++i) CHECK(bit_equal(opt.m_local(i), opt.m()));
        for (size_t k = 0; k < 100; ++k) {
          CHECK(opt.denom()[k] == std::sqrt(opt.v()[k]) + static_cast<float>(o.eps));
        }
      }
      if (t == 13) CHECK_FALSE(errors_zero());  // the first sync compresses u
    });
    CHECK(phases == std::vector<std::string>{"full", "full", "onebit", "full", "onebit", "full",
                                             "onebit", "full", "onebit", "onebit", "onebit", "full",
                                             "sync"});
  }

  TEST_CASE("lrs == 0 at a sync is a clear error") {
    // Unreachable through the optimizer: lr > 0 is enforced and a sync always
    // follows the local step of the same t, so lrs >= lr. The guard itself:
    CHECK(zero_one_check_lrs(0.25, 3) == 0.25);
    for (const double bad : {0.0, -0.5, std::nan("")}) {
      CAPTURE(bad);
      std::string msg;
      try {
        zero_one_check_lrs(bad, 42);
      } catch (const std::runtime_error& e) {
        msg = e.what();
      }
      CHECK(msg.find("zero_one_adam: at the sync of step 42") == 0);
      CHECK(msg.find("learning rates of the local steps since the last sync sum to") !=
            std::string::npos);
      CHECK(msg.find("reference divides by zero") != std::string::npos);
    }
    // lr = 0 (the only way to make lrs 0) is refused up front.
    std::string msg;
    try {
      ZeroOneAdamOptions::schema().read({{"lr", 0}}, "optimizer");
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CHECK(msg == "optimizer.lr = 0: must be > 0");
  }

  TEST_CASE("1 and 2 threads are bit-identical over both stages") {
    const Experiment e = make(R"({"steps": 40, "eval_every": 5,
        "problem": {"name": "quadratic", "dim": 10000, "noise": 0.3},
        "cluster": {"workers": 3},
        "optimizer": {"name": "zero_one_adam", "lr": 0.01, "weight_decay": 0.001,
                      "var_freeze_step": 12, "var_update_scaler": 2,
                      "local_step_scaler": 4, "local_step_clipper": 4}})");
    struct Trace {
      std::vector<double> values;
      std::vector<std::string> phases;
      std::vector<std::vector<float>> params;  // shared, then each worker's
    };
    auto trace = [&](int threads) {
      const int saved = omp_get_max_threads();
      omp_set_num_threads(threads);
      Simulation sim(e);
      Trace tr;
      for (int64_t s = 0; s < e.run.steps; ++s) {
        const auto& m = sim.step();
        tr.phases.emplace_back(m.phase);
        tr.values.push_back(m.train_loss);
        tr.values.push_back(m.grad_norm);
        tr.values.push_back(m.bytes_sent_cum);
        for (double v : m.eval) tr.values.push_back(v);
      }
      tr.params.push_back(copy_of(sim.cluster().params()));
      for (int i = 0; i < sim.cluster().workers(); ++i)
        tr.params.push_back(copy_of(sim.cluster().params(i)));
      omp_set_num_threads(saved);
      return tr;
    };
    const Trace one = trace(1), two = trace(2);
    REQUIRE(one.values.size() == two.values.size());
    CHECK(std::memcmp(one.values.data(), two.values.data(), one.values.size() * 8) == 0);
    CHECK(one.phases == two.phases);
    for (size_t p = 0; p < one.params.size(); ++p) CHECK(bit_equal(one.params[p], two.params[p]));
    // The run spans both stages and has local steps.
    CHECK(std::count(one.phases.begin(), one.phases.end(), "onebit") > 0);
    CHECK(std::count(one.phases.begin(), one.phases.end(), "local") > 0);
    CHECK(std::count(one.phases.begin(), one.phases.end(), "sync") > 0);
  }

  TEST_CASE("shared rows (no local step in the run) give the per-worker rows' bits") {
    // 30 steps of a run told 30 steps: stage B from step 9, every step a sync
    // (local_step_scaler 100), so no per-worker row is held. The same
    // experiment told 200 steps (local steps after 8 + 100) holds x_i, m_i,
    // u_i per worker; its first 30 steps must have the same bits: every
    // metric, the shared parameters, and each worker's parameters. With
    // weight decay (δ reads x_i) and 2 threads (take_gradient() from the cluster's
    // threads, one scratch row each).
    const std::string text = R"("eval_every": 5, "grad_norm_every": 1,
        "problem": {"name": "quadratic", "dim": 3000, "noise": 0.3},
        "cluster": {"workers": 5},
        "optimizer": {"name": "zero_one_adam", "lr": 0.01, "weight_decay": 0.001,
                      "var_freeze_step": 8, "var_update_scaler": 2, "local_step_scaler": 100}})";
    const int saved = omp_get_max_threads();
    omp_set_num_threads(2);
    Simulation shared(make(R"({"steps": 30, )" + text));
    Simulation rows(make(R"({"steps": 200, )" + text));
    CHECK_FALSE(zero_one(shared).per_worker_rows());
    CHECK_FALSE(shared.cluster().has_local_params());
    CHECK(shared.optimizer().held_worker_state_bytes() == 0);
    CHECK(zero_one(rows).per_worker_rows());
    CHECK(rows.optimizer().held_worker_state_bytes() == 2 * 5 * rows.cluster().stride() * 4);
    int syncs = 0;
    for (int64_t t = 1; t <= 30; ++t) {
      CAPTURE(t);
      const StepMetrics a = shared.step(), b = rows.step();
      CHECK(std::string(a.phase) == b.phase);
      syncs += std::string(a.phase) == "sync";
      CHECK(std::memcmp(&a.train_loss, &b.train_loss, sizeof(double)) == 0);
      CHECK(std::memcmp(&a.grad_norm, &b.grad_norm, sizeof(double)) == 0);
      CHECK(a.bytes_sent_cum == b.bytes_sent_cum);
      CHECK(bit_equal(shared.cluster().params(), rows.cluster().params()));
      for (int i = 0; i < 5; ++i) CHECK(bit_equal(shared.cluster().params(i), rows.cluster().params(i)));
      CHECK(bit_equal(zero_one(shared).m_local(0), zero_one(rows).m_local(4)));
    }
    CHECK(syncs == 22);
    omp_set_num_threads(saved);
  }

  TEST_CASE("told fewer steps than it runs: per-worker rows from the first local step, same bits") {
    // Told 8 steps, run 40 (the Driver's held gradient rows: fold_rows): the
    // rows are shared until the first local step, then per worker, copied
    // from the shared values. Against a run never told (per
    // worker from setup), every step's parameters and every worker's agree.
    const ZeroOneAdamOptions o = [] {
      ZeroOneAdamOptions x;
      x.lr = 0.01;
      x.weight_decay = 0.001;
      x.var_freeze_step = 6;
      x.var_update_scaler = 2;
      x.local_step_scaler = 3;
      x.local_step_clipper = 4;
      return x;
    }();
    const FixedProblem problem(random_vector(1000, 9, 1.0f));
    Driver told_driver(problem, 4), plain_driver(problem, 4);
    ZeroOneAdam told(o), plain(o);
    told.set_run_steps(8);
    std::vector<std::vector<float>> trace;
    plain_driver.run(plain, 40, [&](int64_t) {
      trace.push_back(copy_of(plain_driver.cluster.params()));
      for (int i = 0; i < 4; ++i) trace.push_back(copy_of(plain_driver.cluster.params(i)));
    });
    CHECK(plain.per_worker_rows());
    size_t at = 0;
    int64_t first_per_worker = 0;
    told_driver.run(told, 40, [&](int64_t t) {
      CAPTURE(t);
      if (told.per_worker_rows() && first_per_worker == 0) first_per_worker = t;
      CHECK(bit_equal(trace[at++], told_driver.cluster.params()));
      for (int i = 0; i < 4; ++i) CHECK(bit_equal(trace[at++], told_driver.cluster.params(i)));
    });
    // Stage B from step 7; the interval reaches 2 after 3 of its steps (step
    // 9), so step 11 is the first local step.
    CHECK(first_per_worker == 11);
  }

  TEST_CASE("shared rows: more threads after setup() than at it (held rows), same bits") {
    // setup() on 1 thread sizes one scratch row; the steps then run on 2
    // (fold_rows' team grows with them): the scratch must grow too. Against
    // a run never told its steps (per-worker rows), every step's parameters.
    ZeroOneAdamOptions o;
    o.lr = 0.01;
    o.var_freeze_step = 3;
    const FixedProblem problem(random_vector(500, 4, 1.0f));
    Driver shared_driver(problem, 3), rows_driver(problem, 3);
    ZeroOneAdam shared(o), rows(o);
    shared.set_run_steps(12);
    const int saved = omp_get_max_threads();
    std::vector<std::vector<float>> trace;
    omp_set_num_threads(2);
    rows_driver.run(rows, 12, [&](int64_t) { trace.push_back(copy_of(rows_driver.cluster.params())); });
    omp_set_num_threads(1);
    size_t at = 0;
    shared_driver.run(shared, 12, [&](int64_t t) {
      if (t == 1) omp_set_num_threads(2);
      CAPTURE(t);
      CHECK(bit_equal(trace[at++], shared_driver.cluster.params()));
    });
    omp_set_num_threads(saved);
    CHECK_FALSE(shared.per_worker_rows());
    CHECK(std::string(zero_one_phase_name(shared.last_phase())) == "sync");
  }

  TEST_CASE("bytes: full = fp32 ring allreduce, 1-bit and sync = the 1-bit allreduce, local = 0") {
    for (const int n : {2, 5}) {
      CAPTURE(n);
      Json j = Json::parse(R"({"steps": 60, "grad_norm_every": 0,
          "problem": {"name": "quadratic", "dim": 333, "noise": 0.1},
          "cluster": {"workers": 2},
          "optimizer": {"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 12,
                        "var_update_scaler": 2, "local_step_scaler": 4,
                        "local_step_clipper": 8}})");
      j["cluster"]["workers"] = n;
      Simulation sim(resolve_experiment(j, "t"));
      const double onebit_bytes =
          static_cast<double>(zero_one(sim).allreduce().sent_bytes_per_call());
      const double full_bytes = ring_allreduce_cost(n, 333 * 4).sent_bytes;
      // 2·(n−1)·D/(8n) + 8(n−1) with D = 333 padded to n·lcm(n, 8).
      const double D = static_cast<double>(onebit_padded_dim(333, n));
      CHECK(onebit_bytes == 2 * (n - 1) * D / (8 * n) + 8 * (n - 1));
      int counts[4] = {0, 0, 0, 0};
      for (int64_t t = 1; t <= 60; ++t) {
        CAPTURE(t);
        const size_t before = sim.comm().log().size();
        const auto& m = sim.step();
        const std::string phase = m.phase;
        const size_t records = sim.comm().log().size() - before;
        if (phase == "full") {
          ++counts[0];
          CHECK(records == 1);
          CHECK(m.bytes_sent == full_bytes);
        } else if (phase == "onebit") {
          ++counts[1];
          CHECK(records == 4);
          CHECK(m.bytes_sent == onebit_bytes);
        } else if (phase == "local") {
          ++counts[2];
          CHECK(records == 0);
          CHECK(m.bytes_sent == 0.0);
          CHECK(m.messages == 0);
        } else {
          REQUIRE(phase == "sync");
          ++counts[3];
          CHECK(records == 4);
          CHECK(m.bytes_sent == onebit_bytes);
        }
      }
      CHECK(counts[0] == 6);
      CHECK(counts[1] == 6);
      CHECK(counts[2] > 0);
      CHECK(counts[3] > 0);
    }
  }

  TEST_CASE("converges on the quadratic through both stages") {
    // (With lr 0.05 and 8 local steps the noise-free quadratic oscillates
    // and grows: the momentum restarts from the 1-bit ū/lrs at each sync.)
    Simulation sim(make(R"({"steps": 600, "problem": {"name": "quadratic", "dim": 20},
        "cluster": {"workers": 4},
        "optimizer": {"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 100,
                      "local_step_scaler": 50, "local_step_clipper": 8}})"));
    const double start = sim.evaluate()[0];
    for (int s = 0; s < 600; ++s) sim.step();
    const double end = sim.evaluate()[0];
    MESSAGE("eval_loss " << start << " -> " << end);
    CHECK(std::isfinite(end));
    CHECK(end < 1e-4 * start);
  }

  TEST_CASE("options: defaults, registry, pad_multiple checked against 8n") {
    const auto* entry = find_entry(optimizer_registry(), "zero_one_adam");
    REQUIRE(entry != nullptr);
    const Json r = entry->resolve({{"name", "zero_one_adam"}}, "optimizer");
    CHECK(r["lr"] == 1e-3);
    CHECK(r["beta1"] == 0.9);
    CHECK(r["beta2"] == 0.999);
    CHECK(r["eps"] == 1e-8);
    CHECK(r["weight_decay"] == 0.0);
    CHECK(r["bias_correction"] == false);
    CHECK(r["var_freeze_step"] == 100);
    CHECK(r["var_update_scaler"] == 16);
    CHECK(r["local_step_scaler"] == 32768);
    CHECK(r["local_step_clipper"] == 16);
    CHECK(r["pad_multiple"] == 0);
    CHECK(r["wire"] == "fp32");
    auto opt = entry->make(r);
    REQUIRE(opt != nullptr);

    std::string msg;
    try {
      ZeroOneAdamOptions::schema().read({{"local_step_clipper", 0}}, "optimizer");
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CHECK(msg == "optimizer.local_step_clipper = 0: must be >= 1");

    FixedProblem problem(random_vector(10, 1, 1.0f));
    ZeroOneAdamOptions o;
    o.pad_multiple = 24;  // 8n = 32 for 4 workers
    ZeroOneAdam bad(o);
    Driver drv(problem, 4);
    msg.clear();
    try {
      bad.setup(drv.cluster);
    } catch (const ConfigError& e) {
      msg = e.what();
    }
    CHECK(msg ==
          "optimizer.pad_multiple = 24: must be 0 (the reference's n·lcm(n, 8) = 32) or a "
          "multiple of 8·workers = 32");
    o.pad_multiple = 64;
    ZeroOneAdam good(o);
    good.setup(drv.cluster);
    CHECK(good.allreduce().padded_dim() == 64);
  }

  TEST_CASE("var_freeze_step 0: no stage A, local steps from step 1") {
    FixedProblem problem(random_vector(30, 2, 1.0f));
    ZeroOneAdamOptions o;
    o.var_freeze_step = 0;
    o.local_step_scaler = 2;
    o.local_step_clipper = 2;
    ZeroOneAdam opt(o);
    Driver drv(problem, 2);
    std::vector<std::string> phases;
    drv.run(opt, 6, [&](int64_t) { phases.emplace_back(opt.phase()); });
    // interval 1 for steps 1, 2; then 2: syncs at 4, 6.
    CHECK(phases == std::vector<std::string>{"sync", "sync", "local", "sync", "local", "sync"});
    for (int i = 0; i < 2; ++i) CHECK(bit_equal(drv.cluster.params(i), drv.cluster.params()));
  }
}

}  // namespace
}  // namespace bitlab
