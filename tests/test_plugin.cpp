// "Adding an optimizer" (docs/extending.md) is true: an optimizer written in a test file
// and registered with add_optimizer is known to `bitlab list`, runs through
// the engine, and is priced by `bitlab cost` — none of which names it.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "optimizers/common.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/cli/commands.hpp"
#include "sim/engine/catalogue.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/lab/cost.hpp"
#include "tests/cli_fixtures.hpp"
#include "tests/plan_check.hpp"

using namespace bitlab;

namespace {

// A throw-away optimizer: SGD whose gradient allreduce is fp32 for the first
// `exact_steps` steps (phase "exact") and bf16 after (phase "cheap").
struct ThrowAwayOptions {
  double lr = 0.1;
  int64_t exact_steps = 3;
  // Its uncompressed twin, declared here like any optimizer's: SGD, which
  // shares lr.
  static TwinDeclaration twin(const Json&) { return {"sgd", Json::object(), ""}; }
  static Schema<ThrowAwayOptions> schema() {
    using O = ThrowAwayOptions;
    Schema<O> s;
    s.field("lr", &O::lr, "step size", {rules::greater(0.0)});
    s.field("exact_steps", &O::exact_steps, "steps with the fp32 allreduce",
            {rules::at_least<int64_t>(0)});
    return s;
  }
};

class ThrowAway : public Optimizer {
 public:
  explicit ThrowAway(const ThrowAwayOptions& opts) : opts_(opts) {}
  void setup(Cluster& cluster) override { g_.assign(cluster.dim(), 0.0f); }
  void finish_step(StepContext& ctx) override {
    const bool exact = ctx.step <= opts_.exact_steps;
    phase_ = exact ? "exact" : "cheap";
    allreduce_gradients(ctx, g_, exact ? WireDtype::kFp32 : WireDtype::kBf16);
    auto x = ctx.cluster.params();
    for (size_t k = 0; k < g_.size(); ++k) x[k] -= static_cast<float>(opts_.lr) * g_[k];
  }
  const char* phase() const override { return phase_; }
  CommPlan comm_plan(const PlanShape& shape) const override {
    const int64_t exact = std::min(opts_.exact_steps, shape.steps);
    CommPlan plan;
    plan.phases.push_back({"exact", exact, {gradient_allreduce_record(shape, WireDtype::kFp32)}});
    plan.phases.push_back(
        {"cheap", shape.steps - exact, {gradient_allreduce_record(shape, WireDtype::kBf16)}});
    return plan;
  }

 private:
  ThrowAwayOptions opts_;
  const char* phase_ = "exact";
  std::vector<float> g_;
};

void register_once() {
  static const bool done = [] {
    add_optimizer(make_registry_entry<Optimizer, ThrowAway, ThrowAwayOptions>(
        "throw_away", "a test's SGD: fp32 allreduce, then bf16"));
    return true;
  }();
  (void)done;
}

}  // namespace

TEST_SUITE("plugin") {
  TEST_CASE("an optimizer registered in a test file is known to list, run and cost") {
    register_once();
    // list
    CHECK(format_list_options().find("  throw_away: a test's SGD") != std::string::npos);
    CHECK(format_list_options().find("exact_steps") != std::string::npos);
    CHECK(list_options_json()["optimizers"].contains("throw_away"));

    // run: the engine resolves it by name, validates its options, steps it,
    // and logs what its plan says.
    const Json opt = {{"name", "throw_away"}, {"exact_steps", 4}};
    check_plan_matches_run(opt, 4, 50, 10);
    const Json raw = {{"steps", 10},
                      {"problem", {{"name", "quadratic"}, {"dim", 50}}},
                      {"cluster", {{"workers", 4}}},
                      {"optimizer", opt}};
    const testing::TempDir dir;
    RunOptions o;
    o.out_dir = (dir.path / "run").string();
    o.quiet = true;
    CHECK(run_experiment(resolve_experiment(raw, "plugin"), o) == 0);
    CHECK(std::filesystem::exists(dir.path / "run" / "summary.json"));
    try {
      resolve_experiment({{"problem", {{"name", "quadratic"}}},
                          {"optimizer", {{"name", "throw_away"}, {"exact_stepz", 1}}}},
                         "plugin");
      FAIL("a misspelt option was accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find("optimizer.exact_stepz = 1: unknown key") == 0);
    }

    // cost: priced from its own plan, beside the baseline.
    Json spec = Json::parse(R"({"params": 1000000, "workers": 8, "steps": 100,
        "network": {"preset": "ethernet_10g_a100x8"}})");
    spec["optimizer"] = {{"name", "throw_away"}, {"exact_steps", 30}};
    const CostReport r = estimate_cost(resolve_cost_spec(spec));
    REQUIRE(r.job.phases.size() == 2);
    CHECK(r.job.phases[0].plan.name == "exact");
    CHECK(r.job.phases[0].plan.steps == 30);
    CHECK(r.job.phases[1].plan.steps == 70);
    // bf16 halves fp32's bytes: 30 fp32 steps + 70 bf16 steps = 65 fp32 steps.
    CHECK(r.job.total_sent_bytes == doctest::Approx(r.baseline_fp32.total_sent_bytes * 0.65));
    CHECK(format_cost_report(r).find("throw_away / cheap") != std::string::npos);

    // its twin: the one its options struct declares (SGD with its lr), with no
    // edit to the registry.
    const Twin twin = twin_optimizer(
        find_entry(optimizer_registry(), "throw_away")->resolve({{"lr", 0.25}}, "optimizer"));
    REQUIRE(!twin.optimizer.is_null());
    CHECK(twin.optimizer["name"] == "sgd");
    CHECK(twin.optimizer["lr"] == 0.25);
  }

  TEST_CASE("a name can be registered once") {
    register_once();
    CHECK_THROWS_AS(add_optimizer(make_registry_entry<Optimizer, ThrowAway, ThrowAwayOptions>(
                        "throw_away", "again")),
                    std::invalid_argument);
    CHECK_THROWS_AS(add_optimizer(make_registry_entry<Optimizer, ThrowAway, ThrowAwayOptions>(
                        "adam", "a second adam")),
                    std::invalid_argument);
  }
}
