// The per-worker path for gradients made outside bitlab (the Python bridge):
// WorkerTreeIntake (sim/kernels/worker_intake.hpp) against mean_over_workers,
// and a Simulation fed begin_step / take_gradient against `bitlab run`'s own
// (the same problem's gradients, handed in in a shuffled worker order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "problems/problem.hpp"
#include "sim/core/schema.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/kernels/worker_intake.hpp"
#include "sim/kernels/worker_mean.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;

// n rows of `dim` floats, stride `dim`, of mixed magnitudes (so that the
// order of the additions shows in the low bits).
std::vector<float> random_rows(int n, size_t dim, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> rows(static_cast<size_t>(n) * dim);
  for (size_t k = 0; k < rows.size(); ++k) rows[k] = normal(gen) * std::ldexp(1.0f, static_cast<int>(k % 7) - 3);
  return rows;
}

// Row w of `rows` as pieces cut at `cuts` (offsets inside the row).
std::vector<RowPiece> pieces_of(const std::vector<float>& rows, size_t dim, int w,
                                const std::vector<size_t>& cuts) {
  std::vector<RowPiece> out;
  size_t begin = 0;
  for (size_t c : cuts) {
    out.push_back({begin, c - begin, rows.data() + static_cast<size_t>(w) * dim + begin});
    begin = c;
  }
  out.push_back({begin, dim - begin, rows.data() + static_cast<size_t>(w) * dim + begin});
  return out;
}

std::vector<float> intake_mean(const std::vector<float>& rows, int n, size_t dim, WireDtype wire,
                               const std::vector<int>& order, size_t* rows_held = nullptr) {
  WorkerTreeIntake intake(n, dim, wire);
  intake.begin();
  const std::vector<size_t> cuts = {dim / 3, dim / 3 + 1};
  for (int w : order) REQUIRE(intake.take(w, pieces_of(rows, dim, w, cuts)));
  std::vector<float> out(dim);
  intake.finish(out);
  if (rows_held) *rows_held = intake.rows_allocated();
  return out;
}

// A built-in problem whose gradients are handed in: what the bridge's
// ExternalProblem is to the simulation, with the inner problem's tensors,
// start and evaluation (so both runs see the same rules and metrics).
class HandedProblem final : public Problem {
 public:
  explicit HandedProblem(std::unique_ptr<Problem> inner) : inner_(std::move(inner)) {}
  size_t dim() const override { return inner_->dim(); }
  const std::vector<TensorInfo>& tensors() const override { return inner_->tensors(); }
  size_t num_train() const override { return inner_->num_train(); }
  std::span<const int32_t> train_labels() const override { return inner_->train_labels(); }
  int num_classes() const override { return inner_->num_classes(); }
  void init_params(std::span<float> x, uint64_t seed) const override { inner_->init_params(x, seed); }
  double loss_grad(std::span<const float>, std::span<const uint32_t>, std::span<float>,
                   const RngStream&, Workspace&) const override {
    throw std::logic_error("HandedProblem: handed in");
  }
  bool gradients_handed_in() const override { return true; }
  std::vector<std::string> eval_columns() const override { return inner_->eval_columns(); }
  void evaluate(std::span<const float> x, std::span<double> out) const override {
    inner_->evaluate(x, out);
  }

 private:
  std::unique_ptr<Problem> inner_;
};

std::unique_ptr<Problem> registry_problem(const Experiment& e) {
  const auto* entry = find_entry(problem_registry(), e.problem.at("name").get<std::string>());
  return entry->make(e.problem, DataScope{});
}

// Worker w's gradient in `rows_sim`'s cluster as the tensors' buffers.
std::vector<const float*> tensor_buffers(Simulation& rows_sim, int w) {
  Cluster& cl = rows_sim.cluster();
  const std::span<float> g = cl.grad(w);
  std::vector<const float*> out;
  for (const TensorInfo& t : cl.tensors()) out.push_back(g.data() + t.offset);
  if (out.empty()) out.push_back(g.data());
  return out;
}

}  // namespace

TEST_SUITE("handed") {
  TEST_CASE("intake: any worker order gives mean_over_workers' bits, in order log2 n + 1 rows") {
    const size_t dim = 37;
    for (const WireDtype wire : {WireDtype::kFp32, WireDtype::kFp16, WireDtype::kBf16}) {
      for (const int n : {1, 2, 3, 5, 8, 13, 32, 33}) {
        CAPTURE(n);
        CAPTURE(wire_dtype_name(wire));
        const std::vector<float> rows = random_rows(n, dim, static_cast<uint32_t>(n) * 7 + 1);
        std::vector<float> want(dim);
        mean_over_workers({const_cast<float*>(rows.data()), dim, dim, n}, want, wire);
        std::vector<int> order(static_cast<size_t>(n));
        std::iota(order.begin(), order.end(), 0);
        size_t held = 0;
        CHECK(bit_equal(intake_mean(rows, n, dim, wire, order, &held), want));
        CHECK(held <= static_cast<size_t>(WorkerTreeIntake::rows_in_order(n)));
        std::reverse(order.begin(), order.end());
        CHECK(bit_equal(intake_mean(rows, n, dim, wire, order), want));
        std::mt19937 gen(static_cast<uint32_t>(n));
        for (int k = 0; k < 4; ++k) {
          std::shuffle(order.begin(), order.end(), gen);
          CHECK(bit_equal(intake_mean(rows, n, dim, wire, order), want));
        }
      }
    }
  }

  TEST_CASE("intake: the comparison sees another summation order (planted: left to right)") {
    // A left-to-right sum is not the tree's: the check above would fail on it.
    const int n = 13;
    const size_t dim = 37;
    const std::vector<float> rows = random_rows(n, dim, 5);
    std::vector<float> tree(dim), sequential(dim, 0.0f);
    mean_over_workers({const_cast<float*>(rows.data()), dim, dim, n}, tree, WireDtype::kFp32);
    for (int w = 0; w < n; ++w) {
      for (size_t k = 0; k < dim; ++k) sequential[k] += rows[static_cast<size_t>(w) * dim + k];
    }
    for (float& v : sequential) v /= static_cast<float>(n);
    CHECK_FALSE(bit_equal(tree, sequential));
  }

  TEST_CASE("intake: a non-finite element is seen in the same pass and located") {
    std::vector<float> rows = random_rows(3, 10, 9);
    rows[10 + 7] = std::numeric_limits<float>::quiet_NaN();
    WorkerTreeIntake intake(3, 10, WireDtype::kFp16);
    intake.begin();
    CHECK(intake.take(0, pieces_of(rows, 10, 0, {4})));
    const auto bad = pieces_of(rows, 10, 1, {4});
    CHECK_FALSE(intake.take(1, bad));
    CHECK(first_non_finite(bad) == 7);
    std::vector<float> row(10);
    CHECK_FALSE(gather_row_checked(bad, row));
    CHECK(gather_row_checked(pieces_of(rows, 10, 2, {4}), row));
  }

  TEST_CASE("simulation: handed-in gradients, any worker order, give bitlab run's bits") {
    // Each optimizer's path: the mean (adam in fp16 with the fp32 norm tree,
    // lamb), the optimizer's own take_gradient (1-bit Adam and 1-bit LAMB
    // compressed, 0/1 Adam's 1-bit and local steps) and held rows (LoCo).
    const std::vector<std::string> optimizers = {
        R"({"name": "adam", "lr": 0.01, "wire": "fp16"})",
        R"({"name": "lamb", "lr": 0.01})",
        R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 4})",
        R"({"name": "onebit_lamb", "lr": 0.01, "freeze_step": 4})",
        R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 4, "local_step_scaler": 2,
            "local_step_clipper": 2})",
        R"({"name": "loco", "lr": 0.01})"};
    for (const std::string& opt : optimizers) {
      CAPTURE(opt);
      const Experiment e = resolve_experiment(
          Json::parse(R"({"steps": 12, "grad_norm_every": 1, "eval_every": 4,
              "problem": {"name": "mlp", "input_dim": 6, "hidden": 8, "samples": 256, "test_samples": 64},
              "cluster": {"workers": 5, "batch_size": 8},
              "optimizer": )" + opt + "}"),
          "t");
      Simulation rows = testing::simulation_with_rows(e);  // the gradients to hand in
      Simulation computed(e);                              // bitlab run's own path
      Simulation handed(e, std::make_unique<HandedProblem>(registry_problem(e)));
      REQUIRE(handed.handed_in());
      std::mt19937 gen(3);
      std::vector<int> order(5);
      std::iota(order.begin(), order.end(), 0);
      for (int64_t t = 1; t <= e.run.steps; ++t) {
        CAPTURE(t);
        handed.begin_step();  // before the gradients: 0/1 Adam may give workers their own x
        const StepMetrics want = rows.step();
        std::shuffle(order.begin(), order.end(), gen);
        for (int w : order) {
          handed.take_gradient(w, tensor_buffers(rows, w), rows.cluster().loss(w));
        }
        const StepMetrics got = handed.step();
        const StepMetrics run = computed.step();
        CHECK(bit_equal(handed.cluster().params(), rows.cluster().params()));
        CHECK(bit_equal(computed.cluster().params(), rows.cluster().params()));
        CHECK(std::string(got.phase) == want.phase);
        CHECK(std::memcmp(&got.train_loss, &want.train_loss, sizeof(double)) == 0);
        CHECK(std::memcmp(&got.grad_norm, &run.grad_norm, sizeof(double)) == 0);
        CHECK(got.bytes_sent == want.bytes_sent);
        CHECK(got.eval == want.eval);
      }
    }
  }

  TEST_CASE("simulation: a handed-in mean holds log2 n + 1 rows, not n") {
    const Experiment e = resolve_experiment(
        Json::parse(R"({"steps": 2, "problem": {"name": "quadratic", "dim": 1000},
                        "cluster": {"workers": 64}, "optimizer": {"name": "adam"}})"),
        "t");
    Simulation handed(e, std::make_unique<HandedProblem>(registry_problem(e)));
    const size_t row = handed.cluster().stride() * sizeof(float);
    // 7 tree rows and the mean: 8 rows, against 64 gradient rows.
    CHECK(handed.cluster().worker_buffer_bytes() <= 8 * row);
    Simulation rows = testing::simulation_with_rows(e);
    CHECK(rows.cluster().worker_buffer_bytes() >= 64 * row);
  }

  TEST_CASE("simulation: a non-finite gradient is refused by name; the step cannot run") {
    const Experiment e = resolve_experiment(
        Json::parse(R"({"steps": 3, "problem": {"name": "mlp", "input_dim": 3, "hidden": 4, "samples": 64, "test_samples": 16},
                        "cluster": {"workers": 2, "batch_size": 4}, "optimizer": {"name": "adam"}})"),
        "t");
    Simulation rows = testing::simulation_with_rows(e);
    Simulation handed(e, std::make_unique<HandedProblem>(registry_problem(e)));
    CHECK_THROWS_AS(handed.take_gradient(0, tensor_buffers(rows, 0), 1.0), std::logic_error);
    handed.begin_step();
    rows.step();
    handed.take_gradient(0, tensor_buffers(rows, 0), 1.0);
    CHECK_THROWS_WITH_AS(handed.take_gradient(0, tensor_buffers(rows, 0), 1.0),
                         doctest::Contains("worker 0 taken twice"), std::logic_error);
    CHECK_THROWS_WITH_AS(handed.step(), doctest::Contains("1 of 2 workers"), std::logic_error);
    const TensorInfo& second = handed.cluster().tensors().at(1);
    rows.cluster().grad(1)[second.offset + 2] = -std::numeric_limits<float>::infinity();
    CHECK_THROWS_WITH_AS(handed.take_gradient(1, tensor_buffers(rows, 1), 1.0),
                         ("step 1, worker 1, parameter '" + second.name +
                          "': gradient element 2 is -inf: gradients must be finite (lower the lr, "
                          "check the loss, or clip before the worker block ends)")
                             .c_str(),
                         ConfigError);
    CHECK_THROWS_WITH_AS(handed.step(), doctest::Contains("a gradient was refused"),
                         std::logic_error);
    CHECK(handed.steps_done() == 0);
  }
}

}  // namespace bitlab
