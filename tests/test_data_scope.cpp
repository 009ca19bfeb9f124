// Tests of DataScope ("each rank loads only its shard"): a problem
// built for a process that computes some workers holds only their training
// samples (plus, when it evaluates, the evaluation prefix), and everything it
// computes from them is bit-identical to the problem built whole.
#include <doctest/doctest.h>

#include <cstring>
#include <stdexcept>

#include "problems/problem.hpp"
#include "problems/synthetic.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/core/rng.hpp"
#include "sim/engine/config.hpp"
#include "tests/bits.hpp"

using namespace bitlab;

namespace {
using bitlab::testing::bit_equal;

std::unique_ptr<Problem> make_problem(const Json& raw, const DataScope& scope = {}) {
  const auto* entry = find_entry(problem_registry(), raw.at("name").get<std::string>());
  REQUIRE(entry != nullptr);
  return entry->make(entry->resolve(raw, "problem"), scope);
}

ClusterOptions cluster(int workers, const std::string& sharding) {
  ClusterOptions o;
  o.workers = workers;
  o.sharding = sharding;
  o.dirichlet_alpha = 0.3;
  return o;
}

// The scope of a process computing workers `local` of `opts`, as the MPI
// backend builds it (sim/engine/simulation.cpp).
DataScope scope_of(const ClusterOptions& opts, WorkerRange local, bool evaluates) {
  DataScope s;
  s.evaluates = evaluates;
  s.worker_samples = [opts, local](size_t m, std::span<const int32_t> labels, int classes) {
    return samples_of_workers(make_shards(m, labels, classes, opts, 7), local);
  };
  return s;
}

// Loss and gradient of `restricted` on batches drawn from its workers' shards
// equal those of `full`, bit for bit; a sample it does not hold is refused.
void check_same_gradients(const Problem& full, const Problem& restricted,
                          const ClusterOptions& opts, WorkerRange local, size_t eval_prefix = 0) {
  REQUIRE(restricted.dim() == full.dim());
  REQUIRE(restricted.num_train() == full.num_train());
  CHECK(std::equal(full.train_labels().begin(), full.train_labels().end(),
                   restricted.train_labels().begin(), restricted.train_labels().end()));
  const auto shards = make_shards(full, opts, 7);
  std::vector<float> x(full.dim()), g_full(full.dim()), g_part(full.dim());
  full.init_params(x, 3);
  RngStream perturb(5, Purpose::kInit, 9);
  for (float& v : x) v += static_cast<float>(0.1 * perturb.next_normal());
  auto ws_full = full.make_workspace(), ws_part = restricted.make_workspace();
  const RngStream noise(1, Purpose::kGradNoise);
  for (int i = local.begin; i < local.end; ++i) {
    const auto& shard = shards[static_cast<size_t>(i)];
    // Up to 16 samples from both ends of the shard.
    std::vector<uint32_t> batch(shard.begin(), shard.begin() + std::min<size_t>(8, shard.size()));
    batch.insert(batch.end(), shard.end() - std::min<size_t>(8, shard.size()), shard.end());
    const double l_full = full.loss_grad(x, batch, g_full, noise, *ws_full);
    const double l_part = restricted.loss_grad(x, batch, g_part, noise, *ws_part);
    CHECK(std::memcmp(&l_full, &l_part, sizeof l_full) == 0);
    CHECK(bit_equal(g_full, g_part));
  }
  // A sample of a worker outside `local` that no local worker shares (and
  // that is not in the evaluation prefix).
  const auto mine = samples_of_workers(shards, local);
  for (size_t j = eval_prefix; j < full.num_train(); ++j) {
    if (!std::binary_search(mine.begin(), mine.end(), static_cast<uint32_t>(j))) {
      const std::vector<uint32_t> foreign{static_cast<uint32_t>(j)};
      CHECK_THROWS_AS(restricted.loss_grad(x, foreign, g_part, noise, *ws_part), std::logic_error);
      break;
    }
  }
}

}  // namespace

TEST_SUITE("data_scope") {
  TEST_CASE("held_samples: the workers' samples, plus the evaluation prefix when evaluating") {
    DataScope s;
    CHECK_FALSE(held_samples(s, 10, {}, 0, 3).has_value());  // the simulator: all
    s.worker_samples = [](size_t, std::span<const int32_t>, int) {
      return std::vector<uint32_t>{1, 4, 7};
    };
    s.evaluates = false;
    CHECK(*held_samples(s, 10, {}, 0, 3) == std::vector<uint32_t>{1, 4, 7});
    s.evaluates = true;
    CHECK(*held_samples(s, 10, {}, 0, 3) == std::vector<uint32_t>{0, 1, 2, 4, 7});
    CHECK(*held_samples(s, 10, {}, 0, 0) == std::vector<uint32_t>{1, 4, 7});
    // Everything: nullopt, so nothing is remapped.
    CHECK_FALSE(held_samples(s, 10, {}, 0, 10).has_value());
  }

  TEST_CASE("samples_of_workers: sorted union of the local shards") {
    const std::vector<std::vector<uint32_t>> shards{{5, 1}, {3, 9}, {1, 2}, {8}};
    CHECK(samples_of_workers(shards, {1, 3}) == std::vector<uint32_t>{1, 2, 3, 9});
    CHECK(samples_of_workers(shards, {0, 4}) == std::vector<uint32_t>{1, 2, 3, 5, 8, 9});
  }

  TEST_CASE("Samples::hold_only keeps the rows of the listed samples") {
    Samples s;
    s.x.resize(5, 2);
    for (int r = 0; r < 5; ++r) s.x.row(r) << float(r), float(10 * r);
    s.labels = {0, 1, 0, 1, 1};
    s.hold_only(std::vector<uint32_t>{1, 3});
    CHECK(s.count() == 5);
    CHECK(s.held() == 2);
    CHECK(s.row(3)(1) == 30.0f);
    CHECK(s.row(1)(0) == 1.0f);
    CHECK_THROWS_AS(s.row_index(2), std::logic_error);
    CHECK(s.labels.size() == 5);
  }

  TEST_CASE("synthetic problems: a non-evaluating process holds only its workers' rows") {
    // Label-skewed shards need the labels before any feature is kept (the
    // data stream is drawn twice); iid and contiguous ones do not.
    const std::vector<std::pair<Json, std::string>> cases{
        {{{"name", "least_squares"}, {"samples", 300}, {"dim", 7}}, "iid"},
        {{{"name", "least_squares"}, {"samples", 300}, {"dim", 7}}, "contiguous"},
        {{{"name", "logistic"}, {"samples", 301}, {"dim", 5}}, "label_skew"},
        {{{"name", "mlp"}, {"samples", 256}, {"input_dim", 6}, {"hidden", 5}}, "label_skew"},
        {{{"name", "mlp"}, {"samples", 256}, {"input_dim", 6}, {"hidden", 5}}, "iid"},
    };
    for (const auto& [raw, sharding] : cases) {
      // Copies: clang 14 cannot capture a structured binding in CAPTURE.
      const std::string raw_text = raw.dump(), sharding_name = sharding;
      CAPTURE(raw_text);
      CAPTURE(sharding_name);
      const auto opts = cluster(8, sharding);
      const WorkerRange local{2, 4};
      const auto full = make_problem(raw);
      const auto part = make_problem(raw, scope_of(opts, local, false));
      const auto mine = samples_of_workers(make_shards(*full, opts, 7), local);
      CHECK(part->held_train_samples() == mine.size());
      CHECK(part->held_train_samples() < full->num_train());
      CHECK(full->held_train_samples() == full->num_train());
      check_same_gradients(*full, *part, opts, local);
    }
  }

  TEST_CASE("synthetic problems: the evaluating process keeps every row and evaluates alike") {
    const Json raw{{"name", "logistic"}, {"samples", 300}, {"dim", 5}};
    const auto opts = cluster(4, "iid");
    const auto full = make_problem(raw);
    const auto rank0 = make_problem(raw, scope_of(opts, {0, 1}, true));
    CHECK(rank0->held_train_samples() == full->num_train());
    std::vector<float> x(full->dim(), 0.25f);
    std::vector<double> a(full->eval_columns().size()), b(a.size());
    full->evaluate(x, a);
    rank0->evaluate(x, b);
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
    REQUIRE(full->optimal_loss().has_value());
    CHECK(*rank0->optimal_loss() == *full->optimal_loss());
  }

  TEST_CASE("real data: shards held, evaluation prefix on the evaluating process") {
    const std::vector<Json> cases{
        {{"name", "softmax_regression"}, {"dataset", "digits"}, {"train_eval_samples", 50}},
        {{"name", "deep_mlp"},
         {"dataset", "fashion_mnist"},
         {"widths", {8}},
         {"train_samples", 1200},
         {"test_samples", 100},
         {"train_eval_samples", 64}},
        {{"name", "deep_mlp"},
         {"dataset", "fashion_mnist"},
         {"widths", {8}},
         {"train_samples", 0},
         {"test_samples", 50},
         {"train_eval_samples", 64}},
    };
    for (const auto& raw : cases) {
      CAPTURE(raw.dump());
      for (const std::string sharding : {"iid", "label_skew"}) {
        CAPTURE(sharding);
        const auto opts = cluster(8, sharding);
        const auto full = make_problem(raw);
        const auto mine_of = [&](WorkerRange local) {
          return samples_of_workers(make_shards(*full, opts, 7), local);
        };
        // A rank that does not evaluate: its workers' samples only.
        const WorkerRange other{4, 6};
        const auto part = make_problem(raw, scope_of(opts, other, false));
        CHECK(part->held_train_samples() == mine_of(other).size());
        CHECK(part->held_train_samples() < full->num_train() / 2);
        check_same_gradients(*full, *part, opts, other);
        // Rank 0: its workers' samples and the evaluation prefix; its
        // evaluation is the full problem's, bit for bit.
        const WorkerRange first{0, 2};
        const auto rank0 = make_problem(raw, scope_of(opts, first, true));
        auto expect = mine_of(first);
        for (uint32_t j = 0; j < raw.at("train_eval_samples").get<uint32_t>(); ++j) {
          expect.push_back(j);
        }
        std::sort(expect.begin(), expect.end());
        expect.erase(std::unique(expect.begin(), expect.end()), expect.end());
        CHECK(rank0->held_train_samples() == expect.size());
        check_same_gradients(*full, *rank0, opts, first,
                             raw.at("train_eval_samples").get<size_t>());
        std::vector<float> x(full->dim());
        full->init_params(x, 11);
        std::vector<double> a(full->eval_columns().size()), b(a.size());
        full->evaluate(x, a);
        rank0->evaluate(x, b);
        CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
      }
    }
  }

  TEST_CASE("problems without a data set ignore the scope") {
    const auto opts = cluster(4, "iid");
    const auto q =
        make_problem({{"name", "quadratic"}, {"dim", 10}}, scope_of(opts, {1, 2}, false));
    CHECK(q->num_train() == 0);
    CHECK(q->held_train_samples() == 0);
  }
}
