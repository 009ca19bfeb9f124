// LoCo (optimizers/loco.hpp, docs/algorithms.md §6): with an exact quantizer it is
// its base optimizer bit for bit; the error buffer is wired to exactly what
// was sent; bytes; resets; convergence; threads; options.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/loco.hpp"
#include "optimizers/momentum_sgd.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/fixtures.hpp"

namespace bitlab {
namespace {

using testing::FixedProblem;

using testing::GradFn;
// Called after each step with the optimizer (to read its state).
using AfterStep = std::function<void(int64_t step, Optimizer& opt)>;

std::vector<float> run(Optimizer& opt, const Problem& problem, int workers, int steps,
                       const GradFn& grads, Communicator* comm_out = nullptr,
                       const AfterStep& after = nullptr) {
  testing::AfterStepFn each = nullptr;
  if (after) each = [&](int64_t t, const Cluster&, Optimizer&) { after(t, opt); };
  return testing::run_with_gradients(opt, problem, workers, steps, grads, comm_out, each);
}

GradFn random_grads() {
  return [](int64_t t, int i, std::span<float> g) {
    fill_normal(RngStream(17, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t)),
                g, 1.0f);
  };
}

std::vector<float> random_vector(size_t d, uint64_t seed, float scale) {
  std::vector<float> x(d);
  fill_normal(RngStream(seed, Purpose::kTest), x, scale);
  return x;
}

// Gradients on the 4-bit grid of their own groups (group size 128): in every
// group one element is −M (M a power of two, varying with step, worker and
// group) and the others are k·M/8, k ∈ [−8, 7]. Then Q_4(g) = g exactly
// (and Q_8 too: k·M/8 = 16k·M/128), so with e_0 = 0 the error stays 0.
// `same_for_all`: every worker gets worker 0's gradient.
GradFn grid_grads(bool same_for_all) {
  return [same_for_all](int64_t t, int worker, std::span<float> g) {
    const int i = same_for_all ? 0 : worker;
    const RngStream rng(5, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t));
    const size_t groups = (g.size() + 127) / 128;
    for (size_t j = 0; j < groups; ++j) {
      const size_t begin = j * 128, len = std::min<size_t>(128, g.size() - begin);
      const float m = std::ldexp(1.0f, -static_cast<int>((t + i + j) % 3));
      for (size_t k = 0; k < len; ++k) {
        const int code = static_cast<int>(rng.block(begin + k)[0] % 16) - 8;
        g[begin + k] = static_cast<float>(code) * m / 8.0f;
      }
      g[begin + (static_cast<size_t>(t) * 7 + static_cast<size_t>(i) * 3 + j) % len] = -m;
    }
  };
}

bool bit_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::unique_ptr<Optimizer> make_loco(Json raw) {
  raw["name"] = "loco";
  const auto* e = find_entry(optimizer_registry(), "loco");
  REQUIRE(e != nullptr);
  return e->make(e->resolve(raw, "optimizer"));
}

std::string config_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

// ĥ = Q(h) with LoCo's spec and nearest rounding (what the collective sends).
std::vector<float> quantize_nearest(std::span<const float> h, int bits = 4) {
  QuantizeSpec spec;
  spec.bits = bits;
  spec.group_size = 128;
  std::vector<float> out(h.size());
  quantize_dequantize(h, out, spec, RngStream(0, Purpose::kCompress));
  return out;
}

// ---------------------------------------------------------------------------

TEST_SUITE("loco") {
  TEST_CASE("exact quantizer: loco is its base optimizer bit for bit") {
    const size_t d = 300;  // groups of 128, 128 and 44
    const int n = 4, steps = 6;
    FixedProblem problem(random_vector(d, 3, 1.0f));
    SUBCASE("adam, every gather precision that keeps the mean exact, both error storages") {
      AdamOptions ao;
      ao.lr = 0.01;
      ao.weight_decay = 0.01;
      Adam adam(ao);
      const auto want = run(adam, problem, n, steps, grid_grads(false));
      for (const char* gather : {"fp32", "fp16"}) {
        for (const int storage : {8, 32}) {
          for (const int bits : {4, 8}) {
            CAPTURE(gather);
            CAPTURE(storage);
            CAPTURE(bits);
            auto loco = make_loco({{"lr", 0.01},
                                   {"weight_decay", 0.01},
                                   {"gather", gather},
                                   {"error_storage_bits", storage},
                                   {"bits", bits}});
            const auto got = run(
                *loco, problem, n, steps, grid_grads(false), nullptr, [&](int64_t, Optimizer& opt) {
                  auto& l = dynamic_cast<Loco&>(opt);
                  for (int i = 0; i < n; ++i) {
                    const auto e = l.error(i);
                    CHECK(std::all_of(e.begin(), e.end(), [](float v) { return v == 0.0f; }));
                  }
                });
            CHECK(bit_equal(got, want));
          }
        }
      }
      // The averaged mean is off the 4-bit grid, so "quantized" gather only
      // stays exact when every worker holds the same (on-grid) gradient.
      Adam adam_same(ao);
      const auto want_same = run(adam_same, problem, n, steps, grid_grads(true));
      auto loco = make_loco({{"lr", 0.01}, {"weight_decay", 0.01}, {"gather", "quantized"}});
      CHECK(bit_equal(run(*loco, problem, n, steps, grid_grads(true)), want_same));
      // The hierarchical allgather, likewise.
      auto hier = make_loco({{"lr", 0.01}, {"weight_decay", 0.01}, {"node_size", 2}});
      CHECK(bit_equal(run(*hier, problem, n, steps, grid_grads(true)), want_same));
    }
    SUBCASE("adam without bias correction") {
      AdamOptions ao;
      ao.bias_correction = false;
      Adam adam(ao);
      auto loco = make_loco({{"bias_correction", false}, {"gather", "fp32"}});
      CHECK(bit_equal(run(*loco, problem, n, steps, grid_grads(false)),
                      run(adam, problem, n, steps, grid_grads(false))));
    }
    SUBCASE("momentum_sgd, heavy ball and Nesterov") {
      for (const bool nesterov : {false, true}) {
        CAPTURE(nesterov);
        MomentumSgdOptions mo;
        mo.lr = 0.01;
        mo.weight_decay = 0.01;
        mo.nesterov = nesterov;
        MomentumSgd sgd(mo);
        auto loco = make_loco({{"base", "momentum_sgd"},
                               {"lr", 0.01},
                               {"weight_decay", 0.01},
                               {"nesterov", nesterov},
                               {"gather", "fp16"}});
        CHECK(bit_equal(run(*loco, problem, n, steps, grid_grads(false)),
                        run(sgd, problem, n, steps, grid_grads(false))));
      }
    }
  }

  TEST_CASE("the error buffer sees exactly what was sent: e = β e + (1−β)(h − ĥ)") {
    // Exact storage, gather fp32: every quantity is recomputed here from the
    // gradients with the same float operations, so the checks are bit-exact.
    const size_t d = 300;
    const int n = 3;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"error_storage_bits", 32}, {"gather", "fp32"}});
    auto& loco = dynamic_cast<Loco&>(*opt);
    const float beta = 0.8f, one_minus = 1.0f - 0.8f;
    std::vector<std::vector<float>> e(n, std::vector<float>(d, 0.0f));
    std::vector<float> g(d), h(d), qh(n * d);
    const int steps = 50;
    std::vector<std::vector<double>> sum_q(n, std::vector<double>(d, 0.0)),
        sum_g(n, std::vector<double>(d, 0.0));
    run(loco, problem, n, steps, random_grads(), nullptr, [&](int64_t t, Optimizer&) {
      for (int i = 0; i < n; ++i) {
        random_grads()(t, i, g);
        for (size_t k = 0; k < d; ++k) h[k] = g[k] + e[i][k];
        const auto q = quantize_nearest(h);
        std::copy(q.begin(), q.end(), qh.begin() + static_cast<ptrdiff_t>(i * d));
        for (size_t k = 0; k < d; ++k) e[i][k] = beta * e[i][k] + one_minus * (h[k] - q[k]);
        if (t <= 3) {
          CAPTURE(t);
          CAPTURE(i);
          CHECK(bit_equal(loco.quantized(i), q));
          CHECK(bit_equal(loco.error(i), e[i]));
        }
        for (size_t k = 0; k < d; ++k) {
          sum_q[i][k] += loco.quantized(i)[k];
          sum_g[i][k] += g[k];
        }
      }
      if (t <= 3) {
        // ḡ = mean_i ĥ_i (the communicator's tree, fp32 gather).
        std::vector<float> mean(d);
        mean_over_workers({qh.data(), d, d, n}, mean, WireDtype::kFp32);
        CHECK(bit_equal(loco.mean_gradient(), mean));
      }
    });
    // After step 1 (e_0 = 0): e_1 = (1−β)(g_1 − Q(g_1)) — covered by t = 1 above.
    // Telescoping, §6: Σ_{t≤T} ĥ_t = Σ_{t≤T} g_t − e_T/(1−β). In float each
    // step rounds e (|e| ≲ 0.1 here) a few times, error ≲ 1e-8, amplified by
    // 1/(1−β) = 5: over 50 steps ≲ 3e-6; observed max ≈ 5e-7. Bound 2e-5.
    double worst = 0.0;
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < d; ++k) {
        const double rhs = sum_g[i][k] - static_cast<double>(loco.error(i)[k]) / 0.2;
        worst = std::max(worst, std::abs(sum_q[i][k] - rhs));
      }
    }
    MESSAGE("telescoping identity, max abs deviation over 50 steps: " << worst);
    CHECK(worst < 2e-5);
  }

  TEST_CASE("stochastic rounding: the error and the mean use the same draws") {
    // The collective draws the rounding; the error update and ḡ must both
    // read that one ĥ_i (a second, independent quantization would differ).
    const size_t d = 300;
    const int n = 3;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"rounding", "stochastic"},
                          {"error_storage_bits", 32},
                          {"gather", "fp32"},
                          {"compress_seed", 99}});
    auto& loco = dynamic_cast<Loco&>(*opt);
    std::vector<float> g(d), qh(n * d);
    run(loco, problem, n, 1, random_grads(), nullptr, [&](int64_t, Optimizer&) {
      for (int i = 0; i < n; ++i) {
        random_grads()(1, i, g);
        const auto q = loco.quantized(i);
        std::copy(q.begin(), q.end(), qh.begin() + static_cast<ptrdiff_t>(i * d));
        CHECK_FALSE(bit_equal(q, quantize_nearest(g)));  // really stochastic
        std::vector<float> e(d);
        for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
        CHECK(bit_equal(loco.error(i), e));
      }
      std::vector<float> mean(d);
      mean_over_workers({qh.data(), d, d, n}, mean, WireDtype::kFp32);
      CHECK(bit_equal(loco.mean_gradient(), mean));
    });
  }

  TEST_CASE("8-bit error storage: the stored error is Q8 of the fp32 update") {
    const size_t d = 300;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"gather", "fp32"}});  // storage 8 by default
    auto& loco = dynamic_cast<Loco&>(*opt);
    std::vector<float> g(d);
    run(loco, problem, 2, 1, random_grads(), nullptr, [&](int64_t, Optimizer&) {
      for (int i = 0; i < 2; ++i) {
        random_grads()(1, i, g);
        const auto q = quantize_nearest(g);
        std::vector<float> e(d);
        for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
        CHECK(bit_equal(loco.error(i), quantize_nearest(e, 8)));
      }
    });
  }

  TEST_CASE("bytes per step: the quantized reduce-scatter's closed form") {
    const size_t d = 1000;
    const int n = 4;
    FixedProblem problem(random_vector(d, 1, 1.0f));
    // D = 1024 (multiple of n·128), chunk 256: 128 bytes of 4-bit codes + 2
    // fp32 scales = 136 bytes; gather fp16 512, fp32 1024, quantized 136.
    const std::vector<std::pair<const char*, double>> cases = {{"fp16", 3.0 * (136 + 512)},
                                                               {"fp32", 3.0 * (136 + 1024)},
                                                               {"quantized", 3.0 * (136 + 136)}};
    for (const auto& [gather, want] : cases) {
      const std::string gather_name = gather;  // clang 14: no structured binding in CAPTURE
      CAPTURE(gather_name);
      auto opt = make_loco({{"gather", gather}});
      Communicator comm(n);
      run(*opt, problem, n, 2, random_grads(), &comm);
      const auto& loco = dynamic_cast<Loco&>(*opt);
      CHECK(loco.reduce_scatter_bytes_per_step() == want);
      REQUIRE(comm.log().size() == 4);  // alltoall + allgather per step
      for (const int64_t step : {1, 2}) {
        double sent = 0;
        for (const auto& r : comm.log().records()) {
          if (r.step == step) sent += r.sent_bytes;
        }
        CHECK(sent == want);
      }
      CHECK(std::string(comm.log().records()[0].op) == "alltoall");
      CHECK(std::string(comm.log().records()[0].dtype) == "int4");
      CHECK(std::string(comm.log().records()[1].op) == "allgather");
    }
    SUBCASE("hierarchical: per stage") {
      // nbit image of 1000 elements: 500 code bytes + 8 scales·4 = 532.
      // node_size 2: intra allgather (2−1)·532, inter allgather (2−1)·532,
      // intra broadcast of 2 images: ½·1064.
      auto opt = make_loco({{"node_size", 2}});
      Communicator comm(n);
      run(*opt, problem, n, 1, random_grads(), &comm);
      REQUIRE(comm.log().size() == 3);
      const auto& r = comm.log().records();
      CHECK(std::string(r[0].scope) == "intra");
      CHECK(r[0].sent_bytes == 532.0);
      CHECK(std::string(r[1].scope) == "inter");
      CHECK(r[1].sent_bytes == 532.0);
      CHECK(std::string(r[2].op) == "broadcast");
      CHECK(r[2].sent_bytes == 532.0);
    }
  }

  TEST_CASE("reset every reset_T steps") {
    const size_t d = 200;
    const int n = 2;
    FixedProblem problem(random_vector(d, 2, 1.0f));
    std::vector<float> g(d);
    auto fresh_error = [&](int64_t t, int i) {
      random_grads()(t, i, g);
      const auto q = quantize_nearest(g);
      std::vector<float> e(d);
      for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
      return e;
    };
    for (const int64_t reset : {0, 3}) {
      CAPTURE(reset);
      auto opt = make_loco({{"reset_T", reset}, {"error_storage_bits", 32}});
      run(*opt, problem, n, 7, random_grads(), nullptr, [&](int64_t t, Optimizer& o) {
        auto& loco = dynamic_cast<Loco&>(o);
        for (int i = 0; i < n; ++i) {
          CAPTURE(t);
          // Steps T+1, 2T+1, ... start from e = 0: the error is a first step's.
          const bool restarted = t == 1 || (reset > 0 && (t - 1) % reset == 0);
          CHECK(bit_equal(loco.error(i), fresh_error(t, i)) == restarted);
        }
      });
    }
  }

  TEST_CASE("convergence: logistic, 8 workers, within a few % of adam") {
    // 400 steps, batch 16 per worker, lr 0.02, default LoCo (4 bits, group 128,
    // err_beta 0.8, 8-bit error storage, fp16 gather). Observed train_loss_full:
    // start 0.6931 (x = 0), optimum 0.304597; adam 0.304761, loco 0.304775,
    // loco gather=quantized 0.304815 (suboptimality 1.6e-4, 1.8e-4, 2.2e-4).
    auto final_loss = [](const Json& opt) {
      const Json j = {{"steps", 400},
                      {"grad_norm_every", 0},
                      {"problem", {{"name", "logistic"}}},
                      {"cluster", {{"workers", 8}, {"batch_size", 16}}},
                      {"optimizer", opt}};
      Simulation sim(resolve_experiment(j, "t"));
      for (int s = 0; s < 400; ++s) sim.step();
      const auto cols = sim.eval_columns();
      const auto at = std::find(cols.begin(), cols.end(), "train_loss_full") - cols.begin();
      return sim.evaluate()[static_cast<size_t>(at)];
    };
    const double adam = final_loss({{"name", "adam"}, {"lr", 0.02}});
    const double loco = final_loss({{"name", "loco"}, {"lr", 0.02}});
    const double loco_q = final_loss({{"name", "loco"}, {"lr", 0.02}, {"gather", "quantized"}});
    MESSAGE("train_loss_full after 400 steps: adam " << adam << ", loco " << loco
                                                     << ", loco gather=quantized " << loco_q);
    CHECK(adam < 0.5);  // well below log 2 = 0.693 at x = 0
    CHECK(loco <= adam * 1.03);
    CHECK(loco_q <= adam * 1.03);
  }

  TEST_CASE("1 and 2 OpenMP threads give bit-identical results") {
    const size_t d = 74237;  // element loops and quantizer above their parallel thresholds
    FixedProblem problem(random_vector(d, 6, 0.3f));
    const std::vector<Json> configs = {
        {{"weight_decay", 0.02}},
        {{"base", "momentum_sgd"}, {"rounding", "stochastic"}, {"gather", "quantized"}},
        {{"node_size", 2}, {"error_storage_bits", 32}, {"reset_T", 2}},
    };
    const int saved = omp_get_max_threads();
    for (const auto& c : configs) {
      CAPTURE(c.dump());
      std::vector<std::vector<float>> results;
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        auto opt = make_loco(c);
        results.push_back(run(*opt, problem, 4, 3, random_grads()));
      }
      CHECK(bit_equal(results[0], results[1]));
    }
    omp_set_num_threads(saved);
  }

  TEST_CASE("options: defaults, phase, errors name the field") {
    const LocoOptions o = LocoOptions::schema().read(Json::object(), "optimizer");
    CHECK(o.base == "adam");
    CHECK(o.lr == 1e-3);
    CHECK(o.bias_correction);
    CHECK(o.bits == 4);
    CHECK(o.group_size == 128);
    CHECK(o.rounding == "nearest");
    CHECK(o.err_beta == 0.8);
    CHECK(o.reset_T == 1024);
    CHECK(o.error_storage_bits == 8);
    CHECK(o.gather == "fp16");
    CHECK(o.node_size == 0);
    CHECK(o.compress_seed == 0);
    CHECK(std::string(Loco(o).phase()) == "compressed");

    auto err = [](Json j) {
      return config_error_of([&] { LocoOptions::schema().read(j, "optimizer"); });
    };
    CHECK(err({{"bits", 0}}) == "optimizer.bits = 0: must be in [1, 8]");
    CHECK(err({{"bits", 9}}) == "optimizer.bits = 9: must be in [1, 8]");
    CHECK(err({{"err_beta", 1.0}}) == "optimizer.err_beta = 1.0: must be in [0, 1)");
    CHECK(err({{"error_storage_bits", 16}}) ==
          "optimizer.error_storage_bits = 16: must be 8 or 32");
    CHECK(err({{"reset_T", -1}}) == "optimizer.reset_T = -1: must be >= 0");
    CHECK(err({{"group_size", 0}}) == "optimizer.group_size = 0: must be >= 1");
    CHECK(err({{"node_size", -2}}) == "optimizer.node_size = -2: must be >= 0");
    CHECK(err({{"base", "sgd"}}).find("optimizer.base = \"sgd\": must be one of") == 0);
    CHECK(err({{"gather", "int4"}}).find("optimizer.gather = \"int4\": must be one of") == 0);
    CHECK(err({{"rounding", "up"}}).find("optimizer.rounding = \"up\": must be one of") == 0);
    CHECK(err({{"compress_seed", -1}}) == "optimizer.compress_seed = -1: must be >= 0");
    CHECK(err({{"err_betta", 0.5}})
              .find("optimizer.err_betta = 0.5: unknown key; did you mean "
                    "\"err_beta\"?") == 0);
    // node_size must divide the workers: checked at setup.
    const Json bad = {{"steps", 1},
                      {"problem", {{"name", "logistic"}, {"dim", 10}}},
                      {"cluster", {{"workers", 4}}},
                      {"optimizer", {{"name", "loco"}, {"node_size", 3}}}};
    CHECK(config_error_of([&] { Simulation sim(resolve_experiment(bad, "t")); }) ==
          "optimizer.node_size = 3: must divide the number of workers (4)");
  }
}

}  // namespace
}  // namespace bitlab
