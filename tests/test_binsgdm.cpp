// BinSGDM (optimizers/binsgdm.hpp, docs/algorithms.md §7, [verify]): |m| ≤ b, the
// binarization's mean and variance at the optimizer level, bytes, the values
// ū can take, convergence, threads and options.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "optimizers/binsgdm.hpp"
#include "optimizers/optimizer.hpp"
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
using bitlab::testing::config_error_message;

using testing::FixedProblem;

using testing::GradFn;
using AfterStep = std::function<void(int64_t step, BinSgdm& opt)>;

std::vector<float> run(BinSgdm& opt, const Problem& problem, int workers, int steps,
                       const GradFn& grads, Communicator* comm_out = nullptr,
                       const AfterStep& after = nullptr) {
  testing::AfterStepFn each = nullptr;
  if (after) each = [&](int64_t t, const Cluster&, Optimizer&) { after(t, opt); };
  return testing::run_with_gradients(opt, problem, workers, steps, grads, comm_out, each);
}

// N(0, scale²) gradients; with `heavy`, every 7th element is multiplied by
// 1000 and every 11th set to 0 (to stress the |m| ≤ b bound).
GradFn random_grads(float scale = 1.0f, bool heavy = false) {
  return [scale, heavy](int64_t t, int i, std::span<float> g) {
    fill_normal(RngStream(23, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t)),
                g, scale);
    if (heavy) {
      for (size_t k = 0; k < g.size(); k += 7) g[k] *= 1000.0f;
      for (size_t k = 0; k < g.size(); k += 11) g[k] = 0.0f;
    }
  };
}

// `{}` in a braced call is a JSON null: read it as an empty object.
BinSgdmOptions read(const Json& j) {
  return BinSgdmOptions::schema().read(j.is_null() ? Json::object() : j, "optimizer");
}

// ---------------------------------------------------------------------------

TEST_SUITE("binsgdm") {
  TEST_CASE("abs_ema: |m| <= b elementwise at every step, z in [-1, 1]") {
    // Exact in float too: rounding is monotone and sign-symmetric, so
    // |fl(β m + (1−β) g)| <= fl(β b + (1−β)|g|) whenever |m| <= b.
    const size_t d = 500;
    FixedProblem problem(random_vector(d, 1, 1.0f));
    for (const bool amsgrad : {false, true}) {
      for (const double beta : {0.0, 0.5, 0.9, 0.999}) {
        CAPTURE(amsgrad);
        CAPTURE(beta);
        BinSgdm opt(read({{"beta", beta}, {"amsgrad", amsgrad}}));
        int64_t violations = 0, z_out = 0;
        run(opt, problem, 3, 100, random_grads(1.0f, true), nullptr, [&](int64_t, BinSgdm& o) {
          for (int i = 0; i < 3; ++i) {
            for (size_t k = 0; k < d; ++k) {
              violations += std::abs(o.m(i)[k]) > o.b(i)[k];
              z_out += std::abs(o.z(i)[k]) > 1.0f;
            }
          }
        });
        CHECK(violations == 0);
        CHECK(z_out == 0);
      }
    }
  }

  TEST_CASE("E[q] = z and Var[q] = 1 − z² at the optimizer level") {
    // Two steps of N(0,1) gradients give z = (β g1 + g2)/(β|g1| + |g2|)-ish,
    // spread over [−1, 1]. With n·d = 8·20000 independent draws, the
    // standardized sums S = Σ(q − z)/sqrt(Σ(1 − z²)) and
    // T = Σ((q − z)² − (1 − z²))/sqrt(Σ 4z²(1 − z²)) are N(0, 1) to within the
    // CLT; |·| < 5 fails with probability ≈ 5.7e-7 each. The same holds per
    // z-bin (5 bins of S): 7 statistics, false-failure probability < 4e-6
    // (and the seed is fixed, so the outcome is deterministic).
    const size_t d = 20000;
    const int n = 8;
    FixedProblem problem(std::vector<float>(d, 0.0f));
    BinSgdm opt(read({}));
    double s_num = 0, s_den = 0, t_num = 0, t_den = 0;
    std::vector<double> bin_num(5, 0.0), bin_den(5, 0.0);
    run(opt, problem, n, 2, random_grads(), nullptr, [&](int64_t t, BinSgdm& o) {
      if (t != 2) return;
      for (int i = 0; i < n; ++i) {
        const auto z = o.z(i);
        const auto q = o.q(i);
        for (size_t k = 0; k < d; ++k) {
          const double zk = z[k], qk = q[k];
          REQUIRE((qk == 1.0 || qk == -1.0));
          s_num += qk - zk;
          s_den += 1.0 - zk * zk;
          t_num += (qk - zk) * (qk - zk) - (1.0 - zk * zk);
          t_den += 4.0 * zk * zk * (1.0 - zk * zk);
          const int bin = std::min(4, static_cast<int>((zk + 1.0) / 0.4));
          bin_num[bin] += qk - zk;
          bin_den[bin] += 1.0 - zk * zk;
        }
      }
    });
    const double s = s_num / std::sqrt(s_den), tt = t_num / std::sqrt(t_den);
    MESSAGE("standardized mean S = " << s << ", variance statistic T = " << tt);
    CHECK(std::abs(s) < 5.0);
    CHECK(std::abs(tt) < 5.0);
    for (int b = 0; b < 5; ++b) {
      CAPTURE(b);
      REQUIRE(bin_den[b] > 100.0);  // every bin is populated
      CHECK(std::abs(bin_num[b] / std::sqrt(bin_den[b])) < 5.0);
    }
  }

  TEST_CASE("bytes per step: the binarize allgather's closed form") {
    const size_t d = 1001;  // ceil(1001/8) = 126 bytes per bit-vector
    FixedProblem problem(random_vector(d, 2, 1.0f));
    SUBCASE("flat: (n − 1)·ceil(d/8)") {
      for (const int n : {2, 5, 8}) {
        CAPTURE(n);
        BinSgdm opt(read({}));
        Communicator comm(n);
        run(opt, problem, n, 2, random_grads(), &comm);
        REQUIRE(comm.log().size() == 2);
        for (const auto& r : comm.log().records()) {
          CHECK(std::string(r.op) == "allgather");
          CHECK(std::string(r.dtype) == "bits");
          CHECK(r.sent_bytes == doctest::Approx((n - 1) * 126.0).epsilon(1e-12));
        }
      }
    }
    SUBCASE("hierarchical, 8 workers in nodes of 4: per stage") {
      // intra allgather (4−1)·126, inter allgather between the 2 leaders
      // (2−1)·126, intra broadcast of the 2 node vectors ¾·2·126.
      BinSgdm opt(read({{"node_size", 4}}));
      Communicator comm(8);
      run(opt, problem, 8, 1, random_grads(), &comm);
      CHECK(opt.hierarchical());
      REQUIRE(comm.log().size() == 3);
      const auto& r = comm.log().records();
      CHECK(std::string(r[0].scope) == "intra");
      CHECK(r[0].sent_bytes == doctest::Approx(3 * 126.0));
      CHECK(std::string(r[1].scope) == "inter");
      CHECK(r[1].sent_bytes == doctest::Approx(126.0));
      CHECK(std::string(r[2].op) == "broadcast");
      CHECK(r[2].sent_bytes == doctest::Approx(0.75 * 2 * 126.0));
    }
  }

  TEST_CASE("flat: every coordinate of ū is in {−1, −1 + 2/n, ..., 1}") {
    const size_t d = 3000;
    FixedProblem problem(random_vector(d, 3, 1.0f));
    for (const int n : {1, 3, 6, 8}) {
      CAPTURE(n);
      BinSgdm opt(read({}));
      int64_t bad = 0;
      run(opt, problem, n, 3, random_grads(), nullptr, [&](int64_t, BinSgdm& o) {
        for (const float u : o.update()) {
          const double c = (static_cast<double>(u) + 1.0) * n / 2.0;  // count of +1
          bad += std::abs(c - std::round(c)) > 1e-4 || c < -1e-4 || c > n + 1e-4;
        }
      });
      CHECK(bad == 0);
    }
    SUBCASE("hierarchical: ū is a mean of ±1 over the nodes") {
      BinSgdm opt(read({{"node_size", 2}}));
      int64_t bad = 0;
      run(opt, problem, 6, 3, random_grads(), nullptr, [&](int64_t, BinSgdm& o) {
        for (const float u : o.update()) {
          const double c = (static_cast<double>(u) + 1.0) * 3 / 2.0;
          bad += std::abs(c - std::round(c)) > 1e-4;
        }
      });
      CHECK(bad == 0);
    }
  }

  TEST_CASE("the step is x −= lr·(ū + wd·x)") {
    const size_t d = 100;
    const auto x0 = random_vector(d, 4, 1.0f);
    FixedProblem problem(x0);
    BinSgdm opt(read({{"lr", 0.01}, {"weight_decay", 0.1}}));
    std::vector<float> u;
    const auto x = run(opt, problem, 4, 1, random_grads(), nullptr, [&](int64_t, BinSgdm& o) {
      u.assign(o.update().begin(), o.update().end());
    });
    std::vector<float> want(d);
    for (size_t k = 0; k < d; ++k) want[k] = x0[k] - 0.01f * (u[k] + 0.1f * x0[k]);
    CHECK(bit_equal(x, want));
  }

  TEST_CASE("convergence: logistic, 8 workers") {
    // 400 steps, batch 16 per worker, lr 0.01. Observed train_loss_full:
    // start 0.6931 (x = 0), optimum 0.304597; binsgdm 0.307177 flat, 0.309153
    // hierarchical (nodes of 4), 0.309491 sqrt_ema; adam (lr 0.02) 0.304761
    // (tests/test_loco.cpp). Bound 0.33: 93% of the way from start to optimum.
    auto final_loss = [](const Json& opt) {
      const Json j = {{"steps", 400},
                      {"grad_norm_every", 0},
                      {"problem", {{"name", "logistic"}}},
                      {"cluster", {{"workers", 8}, {"batch_size", 16}}},
                      {"optimizer", opt}};
      Simulation sim(resolve_experiment(j, "t"));
      std::string phase;
      for (int s = 0; s < 400; ++s) phase = sim.step().phase;
      CHECK(phase == "onebit");
      const auto cols = sim.eval_columns();
      const auto at = std::find(cols.begin(), cols.end(), "train_loss_full") - cols.begin();
      return sim.evaluate()[static_cast<size_t>(at)];
    };
    const double flat = final_loss({{"name", "binsgdm"}, {"lr", 0.01}});
    const double hier = final_loss({{"name", "binsgdm"}, {"lr", 0.01}, {"node_size", 4}});
    const double sq = final_loss({{"name", "binsgdm"}, {"lr", 0.01}, {"denominator", "sqrt_ema"}});
    MESSAGE("train_loss_full after 400 steps: flat " << flat << ", hierarchical " << hier
                                                     << ", sqrt_ema " << sq);
    for (const double l : {flat, hier, sq}) CHECK(l < 0.33);
  }

  TEST_CASE("1 and 2 OpenMP threads give bit-identical results") {
    const size_t d = 74237;
    FixedProblem problem(random_vector(d, 6, 0.3f));
    const std::vector<Json> configs = {
        {{"weight_decay", 0.02}},
        {{"denominator", "sqrt_ema"}, {"amsgrad", true}},
        {{"node_size", 2}},
    };
    const int saved = omp_get_max_threads();
    for (const auto& c : configs) {
      CAPTURE(c.dump());
      std::vector<std::vector<float>> results;
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        BinSgdm opt(read(c));
        results.push_back(run(opt, problem, 4, 3, random_grads()));
      }
      CHECK(bit_equal(results[0], results[1]));
    }
    omp_set_num_threads(saved);
  }

  TEST_CASE("options: defaults, registry, phase, errors name the field") {
    const BinSgdmOptions o = read(Json::object());
    CHECK(o.lr == 1e-3);
    CHECK(o.beta == 0.9);
    CHECK(o.eps == 1e-8);
    CHECK(o.weight_decay == 0.0);
    CHECK(o.denominator == "abs_ema");
    CHECK_FALSE(o.amsgrad);
    CHECK(o.node_size == 0);
    CHECK(o.compress_seed == 0);
    CHECK(std::string(BinSgdm(o).phase()) == "onebit");
    const auto* e = find_entry(optimizer_registry(), "binsgdm");
    REQUIRE(e != nullptr);
    CHECK(e->resolve({{"name", "binsgdm"}}, "optimizer")["denominator"] == "abs_ema");

    auto err = [](Json j) { return config_error_message([&] { read(j); }); };
    CHECK(err({{"lr", 0}}) == "optimizer.lr = 0: must be > 0");
    CHECK(err({{"beta", 1}}) == "optimizer.beta = 1: must be in [0, 1)");
    CHECK(err({{"eps", -1e-8}}) == "optimizer.eps = -1e-08: must be > 0");
    CHECK(err({{"weight_decay", -0.1}}) == "optimizer.weight_decay = -0.1: must be >= 0");
    CHECK(err({{"denominator", "rms"}}).find("optimizer.denominator = \"rms\": must be one of") ==
          0);
    CHECK(err({{"amsgrad", "yes"}}) == "optimizer.amsgrad = \"yes\": must be true or false");
    CHECK(err({{"node_size", -1}}) == "optimizer.node_size = -1: must be >= 0");
    CHECK(err({{"bta", 0.9}}).find("optimizer.bta = 0.9: unknown key; did you mean \"beta\"?") ==
          0);
    const Json bad = {{"steps", 1},
                      {"problem", {{"name", "logistic"}, {"dim", 10}}},
                      {"cluster", {{"workers", 6}}},
                      {"optimizer", {{"name", "binsgdm"}, {"node_size", 4}}}};
    CHECK(config_error_message([&] { Simulation sim(resolve_experiment(bad, "t")); }) ==
          "optimizer.node_size = 4: must divide the number of workers (6)");
  }
}

}  // namespace
}  // namespace bitlab
