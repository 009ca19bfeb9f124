// The baseline optimizers (sgd, momentum_sgd, adam, lamb): hand-computed
// trajectories, the worker-count and thread-count invariances, the wire type,
// the byte count and the options schemas.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/lamb.hpp"
#include "optimizers/momentum_sgd.hpp"
#include "optimizers/optimizer.hpp"
#include "optimizers/sgd.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;
using bitlab::testing::random_vector;
using bitlab::testing::config_error_message;

using testing::FixedProblem;

using testing::GradFn;

// Runs `steps` steps of `opt` on `workers` workers and returns the final
// parameters. `comm_out`, when given, receives the communicator.
std::vector<float> run_optimizer(Optimizer& opt, const Problem& problem, int workers, int steps,
                       const GradFn& grads, Communicator* comm_out = nullptr) {
  return testing::run_with_gradients(opt, problem, workers, steps, grads, comm_out);
}

// Every worker gets the same gradient table[t-1] (a list per step).
GradFn same_on_all(std::vector<std::vector<float>> table) {
  return [table](int64_t t, int, std::span<float> g) {
    std::copy(table[t - 1].begin(), table[t - 1].end(), g.begin());
  };
}

// Pseudo-random gradient of worker i at step t, N(0, 1) entries.
GradFn random_grads(bool same_for_all_workers) {
  return [same_for_all_workers](int64_t t, int i, std::span<float> g) {
    const uint32_t w = same_for_all_workers ? 0u : static_cast<uint32_t>(i);
    fill_normal(RngStream(7, Purpose::kTest, w, static_cast<uint64_t>(t)), g, 1.0f);
  };
}

// Tensors t0, t1, ... of the given sizes, back to back.
std::vector<TensorInfo> tile(const std::vector<size_t>& sizes) {
  std::vector<TensorInfo> tensors;
  size_t off = 0;
  for (size_t p = 0; p < sizes.size(); ++p) {
    TensorInfo t;
    t.name = std::string("t").append(std::to_string(p));
    t.offset = off;
    t.size = sizes[p];
    tensors.push_back(t);
    off += sizes[p];
  }
  return tensors;
}

// Float vs a double reference. Float's unit roundoff is 2^-24 ≈ 6e-8; a step
// rounds about ten times and each rounding of u is scaled by lr < 1 before it
// reaches x, so three steps stay within ~30 roundings of |x|: 2e-6 at the
// very worst; observed < 1e-7. 1e-6 relative (absolute below |x| = 1) holds
// with margin, and still catches a 1e-5 relative change of one coefficient
// or PyTorch's (1 − lr·wd)·x form of the weight decay (both checked by hand).
void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    CAPTURE(k);
    CAPTURE(got[k]);
    CAPTURE(want[k]);
    CHECK(std::abs(static_cast<double>(got[k]) - want[k]) <=
          1e-6 * std::max(1.0, std::abs(want[k])));
  }
}

// ---------------------------------------------------------------------------

TEST_SUITE("optimizers") {
  TEST_CASE("sgd: two hand-computed steps with weight decay") {
    // x = x − lr·(ḡ + wd·x), lr 0.1, wd 0.5
    //   x1 = (1, −2) − 0.1·((0.5, 1) + 0.5·(1, −2)) = (0.9, −2)
    //   x2 = (0.9, −2) − 0.1·((−1, 0.25) + 0.5·(0.9, −2)) = (0.955, −1.925)
    FixedProblem problem({1.0f, -2.0f}, {});
    SgdOptions o;
    o.lr = 0.1;
    o.weight_decay = 0.5;
    Sgd opt(o);
    auto x1 = run_optimizer(opt, problem, 1, 1, same_on_all({{0.5f, 1.0f}}));
    check_close(x1, {0.9, -2.0});
    Sgd opt2(o);
    auto x2 = run_optimizer(opt2, problem, 1, 2, same_on_all({{0.5f, 1.0f}, {-1.0f, 0.25f}}));
    check_close(x2, {0.955, -1.925});
  }

  TEST_CASE("momentum_sgd: heavy ball, Nesterov and coupled weight decay") {
    FixedProblem problem({1.0f}, {});
    MomentumSgdOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    const auto ones = same_on_all({{1.0f}, {1.0f}});
    SUBCASE("heavy ball") {
      // m1 = 1, x1 = 0.9 ; m2 = 0.9 + 1 = 1.9, x2 = 0.9 − 0.19 = 0.71
      MomentumSgd a(o);
      check_close(run_optimizer(a, problem, 1, 1, ones), {0.9});
      MomentumSgd b(o);
      check_close(run_optimizer(b, problem, 1, 2, ones), {0.71});
    }
    SUBCASE("nesterov") {
      // d1 = 1 + 0.9·1 = 1.9, x1 = 0.81 ; m2 = 1.9, d2 = 1 + 0.9·1.9 = 2.71,
      // x2 = 0.81 − 0.271 = 0.539
      o.nesterov = true;
      MomentumSgd a(o);
      check_close(run_optimizer(a, problem, 1, 1, ones), {0.81});
      MomentumSgd b(o);
      check_close(run_optimizer(b, problem, 1, 2, ones), {0.539});
    }
    SUBCASE("weight decay enters the momentum") {
      // g = 0, wd = 0.1: d1 = 0.1, m1 = 0.1, x1 = 0.99 ; d2 = 0.099,
      // m2 = 0.09 + 0.099 = 0.189, x2 = 0.99 − 0.0189 = 0.9711
      o.weight_decay = 0.1;
      MomentumSgd a(o);
      check_close(run_optimizer(a, problem, 1, 2, same_on_all({{0.0f}, {0.0f}})), {0.9711});
    }
  }

  TEST_CASE("adam: three hand-computed steps, bias correction on/off, weight decay") {
    const std::vector<double> x0 = {1.0, -0.5, 2.0};
    const std::vector<std::vector<double>> g = {
        {0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.1, 0.2}};
    // docs/algorithms.md §2 in double, written out once here:
    //   m = β1 m + (1−β1) g ; v = β2 v + (1−β2) g²
    //   m̂ = m/(1−β1^t), v̂ = v/(1−β2^t) (or m, v) ; x −= lr·(m̂/(sqrt(v̂)+ε) + wd·x)
    auto reference = [&](double lr, double wd, bool bc, int steps) {
      const double b1 = 0.9, b2 = 0.999, eps = 1e-8;
      std::vector<double> x = x0, m(3, 0.0), v(3, 0.0);
      for (int t = 1; t <= steps; ++t) {
        for (size_t k = 0; k < 3; ++k) {
          const double gk = g[t - 1][k];
          m[k] = b1 * m[k] + (1 - b1) * gk;
          v[k] = b2 * v[k] + (1 - b2) * gk * gk;
          const double mh = bc ? m[k] / (1 - std::pow(b1, t)) : m[k];
          const double vh = bc ? v[k] / (1 - std::pow(b2, t)) : v[k];
          x[k] -= lr * (mh / (std::sqrt(vh) + eps) + wd * x[k]);
        }
      }
      return x;
    };
    FixedProblem problem({1.0f, -0.5f, 2.0f}, {});
    const auto grads =
        same_on_all({{0.1f, -0.2f, 0.3f}, {0.05f, 0.4f, -0.1f}, {-0.3f, 0.1f, 0.2f}});

    for (const bool bc : {true, false}) {
      CAPTURE(bc);
      AdamOptions o;
      o.lr = 0.1;
      o.bias_correction = bc;
      for (int steps = 1; steps <= 3; ++steps) {
        CAPTURE(steps);
        Adam opt(o);
        check_close(run_optimizer(opt, problem, 1, steps, grads), reference(0.1, 0.0, bc, steps));
      }
    }
    SUBCASE("first corrected step moves every coordinate by lr against the gradient") {
      // m̂1 = g, v̂1 = g², so x1 = x0 − lr·g/(|g|+ε) ≈ x0 − lr·sign(g).
      AdamOptions o;
      o.lr = 0.1;
      Adam opt(o);
      check_close(run_optimizer(opt, problem, 1, 1, grads), {0.9, -0.4, 1.9});
    }
    SUBCASE("decoupled weight decay") {
      AdamOptions o;
      o.lr = 0.1;
      o.weight_decay = 0.1;
      Adam opt(o);
      check_close(run_optimizer(opt, problem, 1, 3, grads), reference(0.1, 0.1, true, 3));
    }
  }

  TEST_CASE("adam_update_elements is the Adam step (the 1-bit family's warm-up)") {
    const size_t d = 300;
    FixedProblem problem(random_vector(d, 3, 1.0f), {});
    AdamOptions o;
    o.bias_correction = false;
    o.weight_decay = 0.01;
    Adam opt(o);
    const auto got = run_optimizer(opt, problem, 1, 4, random_grads(true));
    // The same four steps written against the shared element update.
    std::vector<float> x = random_vector(d, 3, 1.0f), m(d, 0.0f), v(d, 0.0f), g(d);
    for (int64_t t = 1; t <= 4; ++t) {
      random_grads(true)(t, 0, g);
      adam_update_elements(x, m, v, g,
                           make_adam_coeffs(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                            /*bias_correction=*/false, t));
    }
    CHECK(bit_equal(got, x));
  }

  TEST_CASE("lamb: trust ratio clamps, r = 1 at zero norm, C_p") {
    // Bias correction off: step 1 has m = 0.1 g, v = 0.001 g², so every
    // element of u is 0.1 g/(sqrt(0.001)|g| + ε) ≈ 3.1623 sign(g).
    // Tensors: a: x = 100 (ratio 31.6, clamped to 10); b: x = 1e-3 (ratio
    // 3.2e-4, clamped to 0.01); c: x = 0 (r = 1); e: x = 5 (ratio 1.58).
    FixedProblem problem({100.0f, 1e-3f, 0.0f, 5.0f},
                         {{"a", 0, 1}, {"b", 1, 1}, {"c", 2, 1}, {"e", 3, 1}});
    LambOptions o;
    o.lr = 0.01;
    const std::vector<float> g = {0.5f, -0.25f, 2.0f, 1.0f};
    Lamb opt(o);
    const auto x = run_optimizer(opt, problem, 1, 1, same_on_all({g}));
    auto u = [&](double gk) { return 0.1 * gk / (std::sqrt(0.001 * gk * gk) + 1e-8); };
    const double r_e = 5.0 / std::abs(u(1.0));
    CHECK(opt.trust_ratios()[0] == 10.0);
    CHECK(opt.trust_ratios()[1] == 0.01);
    CHECK(opt.trust_ratios()[2] == 1.0);
    CHECK(opt.trust_ratios()[3] == doctest::Approx(r_e).epsilon(1e-6));
    CHECK(r_e == doctest::Approx(5.0 / std::sqrt(10.0)).epsilon(1e-6));
    check_close(x, {100.0 - 0.01 * 10.0 * u(0.5), 1e-3 - 0.01 * 0.01 * u(-0.25),
                    0.0 - 0.01 * 1.0 * u(2.0), 5.0 - 0.01 * r_e * u(1.0)});
    // C_p = 0.9·0 + 0.1·r_p, except for the r = 1 tensor, which is skipped.
    CHECK(opt.coeff_ema()[0] == doctest::Approx(1.0).epsilon(1e-12));
    CHECK(opt.coeff_ema()[1] == doctest::Approx(0.001).epsilon(1e-12));
    CHECK(opt.coeff_ema()[2] == 0.0);
    CHECK(opt.coeff_ema()[3] == doctest::Approx(0.1 * r_e).epsilon(1e-6));
  }

  TEST_CASE("lamb: C_p is an EMA over steps; weight decay enters u") {
    FixedProblem problem({3.0f, 4.0f}, {{"w", 0, 2}});
    LambOptions o;
    o.lr = 0.01;
    o.weight_decay = 0.5;
    o.coeff_beta = 0.8;
    Lamb opt(o);
    const std::vector<std::vector<float>> table = {{1.0f, -1.0f}, {0.5f, 2.0f}};
    const auto x = run_optimizer(opt, problem, 1, 2, same_on_all(table));
    // Double reference of the same two steps.
    std::vector<double> xd = {3.0, 4.0}, m(2, 0.0), v(2, 0.0);
    double c = 0.0;
    for (int t = 0; t < 2; ++t) {
      std::vector<double> ud(2);
      for (int k = 0; k < 2; ++k) {
        m[k] = 0.9 * m[k] + 0.1 * table[t][k];
        v[k] = 0.999 * v[k] + 0.001 * table[t][k] * table[t][k];
        ud[k] = m[k] / (std::sqrt(v[k]) + 1e-8) + 0.5 * xd[k];
      }
      const double r = std::clamp(std::hypot(xd[0], xd[1]) / std::hypot(ud[0], ud[1]), 0.01, 10.0);
      c = 0.8 * c + 0.2 * r;
      for (int k = 0; k < 2; ++k) xd[k] -= 0.01 * r * ud[k];
    }
    check_close(x, xd);
    CHECK(opt.coeff_ema()[0] == doctest::Approx(c).epsilon(1e-6));
  }

  TEST_CASE("lamb: tensors are independent") {
    // Three tensors together give, tensor by tensor, exactly what each gives
    // alone: the trust ratio of one never sees another's elements.
    const std::vector<size_t> sizes = {700, 13, 5000};
    const std::vector<TensorInfo> tensors = tile(sizes);
    const auto x0 = random_vector(tensors.back().offset + tensors.back().size, 11, 0.5f);
    const auto all_grads = random_grads(false);
    FixedProblem whole(x0, tensors);
    LambOptions o;
    o.lr = 0.05;
    o.weight_decay = 0.01;
    Lamb opt(o);
    const auto x = run_optimizer(opt, whole, 2, 3, all_grads);
    for (const auto& t : tensors) {
      CAPTURE(t.name);
      FixedProblem alone({x0.begin() + t.offset, x0.begin() + t.offset + t.size}, {});
      const GradFn slice = [&](int64_t step, int i, std::span<float> g) {
        std::vector<float> full(x0.size());
        all_grads(step, i, full);
        std::copy(full.begin() + t.offset, full.begin() + t.offset + t.size, g.begin());
      };
      Lamb single(o);
      const auto xs = run_optimizer(single, alone, 2, 3, slice);
      CHECK(bit_equal(xs, {x.begin() + t.offset, x.begin() + t.offset + t.size}));
    }
  }

  TEST_CASE("N workers with identical gradients give the 1-worker result bit for bit") {
    const size_t d = 1000;
    const auto x0 = random_vector(d, 5, 1.0f);
    FixedProblem problem(x0, {{"a", 0, 600}, {"b", 600, 400}});
    for (const auto& entry : optimizer_registry()) {
      // BinSGDM binarizes each worker's z with its own random stream: n
      // workers average n independent draws, equal to one worker's only in
      // expectation (tests/test_binsgdm.cpp checks that), so it is skipped.
      if (entry.name == "binsgdm") continue;
      CAPTURE(entry.name);
      Json raw = {{"name", entry.name}, {"weight_decay", 0.01}};
      const Json resolved = entry.resolve(raw, "optimizer");
      auto one = entry.make(resolved);
      const auto reference = run_optimizer(*one, problem, 1, 3, random_grads(true));
      for (const int n : {2, 4, 8}) {
        CAPTURE(n);
        auto opt = entry.make(resolved);
        CHECK(bit_equal(run_optimizer(*opt, problem, n, 3, random_grads(true)), reference));
      }
    }
  }

  TEST_CASE("wire fp16: same as fp32 on pre-rounded gradients with the mean rounded") {
    const size_t d = 777;
    const int n = 4;
    FixedProblem problem(random_vector(d, 9, 1.0f), {{"a", 0, 500}, {"b", 500, 277}});
    // The communicator's fp16 mean: round each input, sum as the tree
    // ((g0 + g1) + (g2 + g3)) in fp32, divide by 4, round.
    const GradFn rounded_mean = [&](int64_t t, int, std::span<float> g) {
      std::vector<std::vector<float>> h(n, std::vector<float>(d));
      for (int i = 0; i < n; ++i) random_grads(false)(t, i, h[i]);
      for (size_t k = 0; k < d; ++k) {
        const float s = (round_to_half(h[0][k]) + round_to_half(h[1][k])) +
                        (round_to_half(h[2][k]) + round_to_half(h[3][k]));
        g[k] = round_to_half(s / 4.0f);
      }
    };
    SUBCASE("adam") {
      AdamOptions o;
      o.wire = "fp16";
      Adam half(o);
      const auto got = run_optimizer(half, problem, n, 3, random_grads(false));
      o.wire = "fp32";
      Adam full(o);
      CHECK(bit_equal(got, run_optimizer(full, problem, 1, 3, rounded_mean)));
    }
    SUBCASE("lamb") {
      LambOptions o;
      o.wire = "fp16";
      Lamb half(o);
      const auto got = run_optimizer(half, problem, n, 3, random_grads(false));
      o.wire = "fp32";
      Lamb full(o);
      CHECK(bit_equal(got, run_optimizer(full, problem, 1, 3, rounded_mean)));
    }
  }

  TEST_CASE("bytes: one ring allreduce of the gradient per step") {
    const size_t d = 1000;
    FixedProblem problem(random_vector(d, 1, 1.0f), {});
    for (const std::string wire : {"fp32", "fp16", "bf16"}) {
      CAPTURE(wire);
      AdamOptions o;
      o.wire = wire;
      Adam opt(o);
      Communicator comm(4);
      run_optimizer(opt, problem, 4, 1, random_grads(false), &comm);
      REQUIRE(comm.log().size() == 1);
      const CommRecord& r = comm.log().records()[0];
      const int64_t bytes = wire == "fp32" ? 4000 : 2000;
      CHECK(std::string(r.op) == "allreduce");
      CHECK(std::string(r.algorithm) == "ring");
      CHECK(std::string(r.dtype) == wire);
      CHECK(r.step == 1);
      CHECK(r.ranks == 4);
      CHECK(r.payload_bytes == bytes);
      CHECK(r.sent_bytes == 2.0 * 3.0 / 4.0 * static_cast<double>(bytes));
      CHECK(r.messages == 6);
    }
  }

  TEST_CASE("1 and 2 OpenMP threads give bit-identical results") {
    // Large enough that the element loops (> 4096 elements) and the blocked
    // norms (>= 16 blocks of 4096) really run in parallel.
    const std::vector<size_t> sizes = {70000, 3000, 37, 1200};
    const std::vector<TensorInfo> tensors = tile(sizes);
    FixedProblem problem(random_vector(tensors.back().offset + tensors.back().size, 4, 0.3f),
                         tensors);
    const int saved = omp_get_max_threads();
    for (const auto& entry : optimizer_registry()) {
      CAPTURE(entry.name);
      const Json resolved = entry.resolve({{"name", entry.name}, {"weight_decay", 0.02}}, "");
      std::vector<std::vector<float>> results;
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        auto opt = entry.make(resolved);
        results.push_back(run_optimizer(*opt, problem, 3, 3, random_grads(false)));
      }
      CHECK(bit_equal(results[0], results[1]));
    }
    omp_set_num_threads(saved);
  }

  TEST_CASE("schemas: defaults, rules and messages") {
    SUBCASE("defaults") {
      const AdamOptions a = AdamOptions::schema().read(Json::object(), "optimizer");
      CHECK(a.lr == 1e-3);
      CHECK(a.beta1 == 0.9);
      CHECK(a.beta2 == 0.999);
      CHECK(a.eps == 1e-8);
      CHECK(a.weight_decay == 0.0);
      CHECK(a.bias_correction);
      CHECK(a.wire == "fp32");
      const LambOptions l = LambOptions::schema().read(Json::object(), "optimizer");
      CHECK(l.max_coeff == 10.0);
      CHECK(l.min_coeff == 0.01);
      CHECK(l.coeff_beta == 0.9);
      CHECK_FALSE(l.bias_correction);
      const MomentumSgdOptions ms = MomentumSgdOptions::schema().read(Json::object(), "");
      CHECK(ms.momentum == 0.9);
      CHECK_FALSE(ms.nesterov);
      CHECK(SgdOptions::schema().read(Json::object(), "").lr == 0.01);
    }
    SUBCASE("every field has a doc string and a type") {
      for (const auto& entry : optimizer_registry()) {
        CAPTURE(entry.name);
        CHECK_FALSE(entry.summary.empty());
        for (const auto& f : entry.fields) {
          CAPTURE(f.name);
          CHECK_FALSE(f.doc.empty());
          CHECK_FALSE(f.type.empty());
        }
      }
    }
    SUBCASE("field rules") {
      const auto adam = AdamOptions::schema();
      auto read = [&](Json j) { return [&adam, j] { adam.read(j, "optimizer"); }; };
      CHECK(config_error_message(read({{"beta1", 1}})) == "optimizer.beta1 = 1: must be in [0, 1)");
      CHECK(config_error_message(read({{"beta2", -0.1}})) ==
            "optimizer.beta2 = -0.1: must be in [0, 1)");
      CHECK(config_error_message(read({{"lr", 0}})) == "optimizer.lr = 0: must be > 0");
      CHECK(config_error_message(read({{"eps", 0.0}})) == "optimizer.eps = 0.0: must be > 0");
      CHECK(config_error_message(read({{"weight_decay", -1}})) ==
            "optimizer.weight_decay = -1: must be >= 0");
      CHECK(config_error_message(read({{"wire", "fp8"}}))
                .find("optimizer.wire = \"fp8\": must be one of \"fp32\", \"fp16\", \"bf16\"") ==
            0);
      CHECK(config_error_message(read({{"bias_correction", 1}})) ==
            "optimizer.bias_correction = 1: must be true or false");
      CHECK(config_error_message([] {
              MomentumSgdOptions::schema().read({{"momentum", 1.0}}, "optimizer");
            }) == "optimizer.momentum = 1.0: must be in [0, 1)");
      CHECK(config_error_message([] {
              SgdOptions::schema().read({{"lr", -0.5}}, "optimizer");
            }) == "optimizer.lr = -0.5: must be > 0");
    }
    SUBCASE("unknown option: did you mean") {
      const std::string msg = config_error_message([] {
        AdamOptions::schema().read({{"betta1", 0.9}}, "optimizer");
      });
      CHECK(msg.find("optimizer.betta1 = 0.9: unknown key; did you mean \"beta1\"?") == 0);
    }
    SUBCASE("lamb: min_coeff <= max_coeff") {
      const std::string msg = config_error_message([] {
        LambOptions::schema().read({{"min_coeff", 20}, {"max_coeff", 10}}, "optimizer");
      });
      CHECK(msg == "optimizer.min_coeff = 20.0: must be <= max_coeff (10)");
      CHECK_NOTHROW(LambOptions::schema().read({{"min_coeff", 1}, {"max_coeff", 1}}, ""));
    }
  }

  TEST_CASE("registry: names, resolution with defaults, construction") {
    const auto& reg = optimizer_registry();
    for (const char* name : {"sgd", "momentum_sgd", "adam", "lamb"}) {
      CAPTURE(name);
      const auto* e = find_entry(reg, name);
      REQUIRE(e != nullptr);
      const Json resolved = e->resolve({{"name", name}}, "optimizer");
      CHECK(resolved["name"] == name);
      CHECK(resolved["wire"] == "fp32");
      CHECK(resolved.contains("lr"));
      auto opt = e->make(resolved);
      REQUIRE(opt != nullptr);
      CHECK(std::string(opt->phase()) == "full");
    }
    const Json adam = find_entry(reg, "adam")->resolve({{"name", "adam"}, {"lr", 0.5}}, "o");
    CHECK(adam["lr"] == 0.5);
    CHECK(adam["beta2"] == 0.999);
    CHECK(adam["bias_correction"] == true);
    CHECK(find_entry(reg, "lamb")->resolve({{"name", "lamb"}}, "o")["bias_correction"] == false);
    CHECK(config_error_message([&] {
            find_entry(reg, "sgd")->resolve({{"name", "sgd"}, {"momentum", 0.9}}, "optimizer");
          }).find("optimizer.momentum = 0.9: unknown key") == 0);
  }
}

}  // namespace
}  // namespace bitlab
