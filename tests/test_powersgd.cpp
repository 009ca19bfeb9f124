// PowerSGD as a gradient exchange (sim/collectives/powersgd.hpp): DDP's
// bucket rule by hand, the low-rank kernels on matrices worked out by hand, a
// rank-1 gradient the exchange must return exactly, the options' refusals, and
// the records against the plan `cost` prices. tests/python/test_powersgd_ddp.py
// checks the whole exchange against torch's own hook over gloo.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/powersgd.hpp"
#include "sim/comm/comm.hpp"
#include "sim/engine/config.hpp"
#include "sim/kernels/low_rank.hpp"
#include "sim/lab/cost.hpp"
#include "tests/cli_fixtures.hpp"
#include "tests/fixtures.hpp"
#include "tests/plan_check.hpp"

namespace bitlab {
namespace {
using testing::config_error_message;
using testing::config_error_path;

Experiment adam_with(const Json& exchange, int64_t steps = 12) {
  return resolve_experiment(
      Json{{"steps", steps},
           {"problem", {{"name", "quadratic"}, {"dim", 4096}, {"tensors", 4}}},
           {"cluster", {{"workers", 4}}},
           {"optimizer", {{"name", "adam"}, {"lr", 0.01}, {"gradient_exchange", exchange}}}},
      "t");
}

}  // namespace

TEST_SUITE("powersgd") {
  TEST_CASE("DDP's bucket rule by hand: close a bucket once it holds its limit") {
    // Tensors of 4, 4, 8 and 2 bytes in the order 3, 2, 1, 0; limits 10 then 6:
    // 2 + 8 = 10 closes the first, 4 + 4 = 8 >= 6 the second.
    CHECK(ddp_bucket_assignment({4, 4, 8, 2}, {3, 2, 1, 0}, {10, 6}) ==
          std::vector<std::vector<int>>{{3, 2}, {1, 0}});
    // What is left when the order ends is a bucket of its own.
    CHECK(ddp_bucket_assignment({4, 4, 8, 2}, {0, 1, 2, 3}, {100}) ==
          std::vector<std::vector<int>>{{0, 1, 2, 3}});
    CHECK(ddp_bucket_assignment({4, 4, 8, 2}, {0, 1, 2, 3}, {1}) ==
          std::vector<std::vector<int>>{{0}, {1}, {2}, {3}});
  }

  TEST_CASE("low-rank kernels on a 3 x 2 matrix, by hand") {
    const std::vector<float> m = {1, 2, 3, 4, 5, 6};  // rows (1 2), (3 4), (5 6)
    const std::vector<float> q = {1, 1};               // 2 x 1
    std::vector<float> p(3), q2(2), back(6);
    low_rank_project(m.data(), 3, 2, q.data(), 1, p.data());
    CHECK(p == std::vector<float>{3, 7, 11});
    low_rank_project_back(m.data(), 3, 2, p.data(), 1, q2.data());
    CHECK(q2 == std::vector<float>{1 * 3 + 3 * 7 + 5 * 11, 2 * 3 + 4 * 7 + 6 * 11});
    low_rank_expand(p.data(), q2.data(), 3, 2, 1, back.data());
    CHECK(back == std::vector<float>{3 * 79, 3 * 100, 7 * 79, 7 * 100, 11 * 79, 11 * 100});
  }

  TEST_CASE("Gram-Schmidt in the hook's order, by hand, and epsilon") {
    // Columns (3, 4) and (1, 1): the first becomes (0.6, 0.8); the second
    // loses 1.4·(0.6, 0.8), leaving (0.16, -0.12), of norm 0.2: (0.8, -0.6).
    // Tolerance 1e-6: a few float roundings of numbers near 1.
    std::vector<float> a = {3, 1, 4, 1};  // row-major 2 x 2
    orthogonalize_columns(a.data(), 2, 2, 0.0);
    CHECK(a[0] == doctest::Approx(0.6).epsilon(1e-6));
    CHECK(a[2] == doctest::Approx(0.8).epsilon(1e-6));
    CHECK(a[1] == doctest::Approx(0.8).epsilon(1e-6));
    CHECK(a[3] == doctest::Approx(-0.6).epsilon(1e-6));
    // With epsilon the column is divided by its norm + epsilon: 5.5, not 5.
    std::vector<float> b = {3, 4};
    orthogonalize_columns(b.data(), 2, 1, 0.5);
    CHECK(b[0] == doctest::Approx(3 / 5.5).epsilon(1e-6));
    // A zero column with epsilon 0 is 0/0, NaN, as torch's division gives.
    std::vector<float> z = {0, 0};
    orthogonalize_columns(z.data(), 2, 1, 0.0);
    CHECK(std::isnan(z[0]));
  }

  TEST_CASE("a rank-1 gradient comes back exactly: P·Qᵀ of rank 1 is the matrix itself") {
    // Every worker's gradient is u·vᵀ (8 x 6) plus a 1-D tensor; PowerSGD of
    // rank 1 returns P Pᵀ M = M for a rank-1 M. Tolerance 1e-5 relative:
    // float products and one normalisation.
    const int n = 4;
    std::vector<TensorInfo> tensors = {{"w", 0, 48, 8, 6}, {"b", 48, 6}};
    PowerSgdOptions o;
    o.start_powerSGD_iter = 0;
    o.use_error_feedback = false;
    o.warm_start = false;
    PowerSgdExchange x(o, n, 54, tensors);
    x.setup(0, n);
    std::vector<float> rows(static_cast<size_t>(n) * 54);
    for (int w = 0; w < n; ++w) {
      for (int i = 0; i < 8; ++i) {
        for (int j = 0; j < 6; ++j) rows[w * 54 + i * 6 + j] = (i + 1.0f) * (j - 2.5f);
      }
      for (int k = 48; k < 54; ++k) rows[w * 54 + k] = static_cast<float>(w + k);
    }
    Communicator comm(n);
    std::vector<float> out(54);
    x.exchange(comm, {rows.data(), 54, 54, n, 0, 0}, 1, out);
    for (int k = 0; k < 48; ++k) CHECK(out[k] == doctest::Approx(rows[k]).epsilon(1e-5));
    // The 1-D tensor is averaged: mean of w + k over w = 0..3 is k + 1.5.
    for (int k = 48; k < 54; ++k) CHECK(out[k] == doctest::Approx(k + 1.5).epsilon(1e-6));
    // Records: the uncompressed allreduce (6 floats), P (8) and Q (6).
    const auto& recs = comm.log().records();
    REQUIRE(recs.size() == 3);
    CHECK(recs[0].payload_bytes == 24);
    CHECK(recs[1].payload_bytes == 32);
    CHECK(recs[2].payload_bytes == 24);
  }

  TEST_CASE("bad options are refused naming the field, the value and the rule") {
    auto path_of = [](const char* exchange) {
      return config_error_path([&] { adam_with(Json::parse(exchange)); });
    };
    CHECK(path_of(R"({"name": "powersgd", "matrix_approximation_rank": 0})") ==
          "optimizer.gradient_exchange.matrix_approximation_rank");
    CHECK(path_of(R"({"name": "powersgd", "rank": 2})") == "optimizer.gradient_exchange.rank");
    CHECK(path_of(R"({"name": "powersgd", "warm_start": "yes"})") ==
          "optimizer.gradient_exchange.warm_start");
    CHECK(path_of(R"({"name": "power_sgd"})") == "optimizer.gradient_exchange.name");
    CHECK(path_of(R"({"name": "allreduce", "matrix_approximation_rank": 2})") ==
          "optimizer.gradient_exchange.matrix_approximation_rank");
    CHECK(path_of(R"({"name": "powersgd", "random_seed": 4294967296})") ==
          "optimizer.gradient_exchange.random_seed");
    CHECK(path_of(R"({"matrix_approximation_rank": 2})") == "optimizer.gradient_exchange.name");
    // torch's own refusal: a start <= 1 with error feedback or warm start.
    const std::string start = config_error_message(
        [] { adam_with(Json::parse(R"({"name": "powersgd", "start_powerSGD_iter": 1})")); });
    CHECK(start.find("optimizer.gradient_exchange.start_powerSGD_iter = 1") != std::string::npos);
    CHECK(start.find("must be > 1 when use_error_feedback or warm_start") != std::string::npos);
    CHECK(path_of(R"({"name": "powersgd", "start_powerSGD_iter": 1, "use_error_feedback": false,
                      "warm_start": false})") == "(no error)");
    // PowerSGD compresses fp32 buckets.
    CHECK(config_error_path([] {
            resolve_experiment(Json::parse(R"({"problem": {"name": "quadratic"},
              "optimizer": {"name": "sgd", "wire": "fp16",
                            "gradient_exchange": {"name": "powersgd"}}})"),
                               "t");
          }) == "optimizer.wire");
    // An optimizer that compresses its own exchange refuses the option by name.
    const std::string own = config_error_message([] {
      resolve_experiment(Json::parse(R"({"problem": {"name": "quadratic"},
        "optimizer": {"name": "onebit_adam", "gradient_exchange": {"name": "powersgd"}}})"),
                         "t");
    });
    CHECK(own.find("optimizer.gradient_exchange") != std::string::npos);
    CHECK(own.find("compresses its own exchange") != std::string::npos);
  }

  TEST_CASE("the CLI exits 2 on a bad gradient_exchange, naming it") {
    const testing::TempDir dir;
    const std::string file = dir.file("e.json", R"({"problem": {"name": "quadratic"},
      "optimizer": {"name": "adam", "gradient_exchange": {"name": "powersgd",
                    "matrix_approximation_rank": -1}}})");
    const auto r = testing::run_bitlab(dir, "validate " + file);
    CHECK(r.status == 2);
    CHECK(r.err.find("optimizer.gradient_exchange.matrix_approximation_rank = -1") !=
          std::string::npos);
  }

  TEST_CASE("the plan cost prices is what a run logs, plain steps and compressed") {
    // d = 4096 in 4 square tensors of 32 x 32: one bucket (below DDP's 1 MiB).
    for (const char* exchange :
         {R"({"name": "powersgd", "start_powerSGD_iter": 5})",
          R"({"name": "powersgd", "start_powerSGD_iter": 5, "matrix_approximation_rank": 4})",
          R"({"name": "powersgd", "start_powerSGD_iter": 0, "use_error_feedback": false,
              "warm_start": false, "min_compression_rate": 100})"}) {
      const Json opt = {{"name", "momentum_sgd"}, {"gradient_exchange", Json::parse(exchange)}};
      check_plan_matches_run(opt, 4, 4096, 10, true, 4);
    }
  }

  TEST_CASE("cost: tensor_rows gives each tensor its shape; a 1-D one stays uncompressed") {
    // A 64 x 64 weight and its 64-element bias: with their shapes the bias is
    // 1-D (never compressed at rate 2), so a PowerSGD step allreduces the bias,
    // P and Q; priced as most-square matrices the bias (8 x 8) is compressed too
    // and the uncompressed allreduce disappears.
    const Json spec = Json::parse(R"({"params": 4160, "workers": 4, "steps": 10,
      "tensor_sizes": [4096, 64], "tensor_rows": [64, 0], "network": {"preset": "ethernet_40g_v100x4"},
      "optimizer": {"name": "sgd", "gradient_exchange": {"name": "powersgd",
                    "start_powerSGD_iter": 2}}})");
    auto records = [](const Json& j) {
      const CostSpec c = resolve_cost_spec(j);
      const CommPlan plan = plan_communication(c.optimizer, 4160, 4, 10, 0, cost_layout(c.settings));
      return plan.phases.back().records;
    };
    const auto shaped = records(spec);
    REQUIRE(shaped.size() == 3);
    CHECK(shaped[0].payload_bytes == 4 * 64);       // the bias, uncompressed
    CHECK(shaped[1].payload_bytes == 4 * 64 * 1);   // P: 64 rows x rank 1
    Json square = spec;
    square.erase("tensor_rows");
    CHECK(records(square).size() == 2);
    // Bad shapes are refused naming the entry and the rule.
    Json bad = spec;
    bad["tensor_rows"] = Json::array({64});
    CHECK(config_error_path([&] { resolve_cost_spec(bad); }) == "tensor_rows");
    bad["tensor_rows"] = Json::array({60, 0});
    CHECK(config_error_path([&] { resolve_cost_spec(bad); }) == "tensor_rows.0");
  }

  TEST_CASE("phases: full before start_powerSGD_iter, powersgd after; the gradient shrinks") {
    Simulation sim(adam_with(Json::parse(R"({"name": "powersgd", "start_powerSGD_iter": 3})")));
    std::vector<std::string> phases;
    for (int t = 0; t < 5; ++t) phases.push_back(sim.step().phase);
    CHECK(phases == std::vector<std::string>{"full", "full", "full", "powersgd", "powersgd"});
    // 4 tensors of 32 x 32 at rank 1: P and Q of 4·32 floats each, against
    // 4096 floats for the plain mean.
    const auto& recs = sim.comm().log().records();
    CHECK(recs.front().payload_bytes == 4 * 4096);
    CHECK(recs.back().payload_bytes == 4 * 4 * 32);
  }
}

}  // namespace bitlab
