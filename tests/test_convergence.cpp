// Issue-4 convergence check (the papers' "same convergence as Adam" claim on
// small problems): for the logistic-regression and MLP problems with n = 16
// workers, every optimizer gets the learning rate that is best on the same
// small grid as Adam's, and its final full-training-set loss must end within
// 2 % of Adam's after the same number of steps. 1-bit Adam without error
// feedback must end measurably worse than with it. The experiment files are
// experiments/convergence/<problem>_<optimizer>.json; the table printed here
// is what experiments/convergence/README.md reports.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "sim/engine/simulation.hpp"

using namespace bitlab;

namespace {

const std::vector<double> kLrGrid = {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2};

struct Best {
  double lr = 0.0;
  double loss = std::numeric_limits<double>::infinity();
};

// Final train_loss_full of one run (inf when it diverged).
double final_loss(const std::string& file, double lr) {
  Json raw = load_json_file(file);
  apply_set(raw, "optimizer.lr=" + std::to_string(lr));
  const Experiment e = resolve_experiment(raw, "convergence");
  Simulation sim(e);
  for (int64_t t = 0; t < e.run.steps; ++t) {
    const auto& m = sim.step();
    if (!std::isfinite(m.train_loss)) return std::numeric_limits<double>::infinity();
  }
  const auto cols = sim.eval_columns();
  const auto vals = sim.evaluate();
  for (size_t k = 0; k < cols.size(); ++k) {
    if (cols[k] == "train_loss_full") return vals[k];
  }
  FAIL("problem has no train_loss_full column");
  return 0.0;
}

Best sweep(const std::string& problem, const std::string& optimizer) {
  const std::string file = std::string(BITLAB_SOURCE_DIR) + "/experiments/convergence/" + problem +
                           "_" + optimizer + ".json";
  Best best;
  for (double lr : kLrGrid) {
    const double loss = final_loss(file, lr);
    if (loss < best.loss) best = {lr, loss};
  }
  return best;
}

// Claims that did not hold when measured (experiments/convergence/README.md
// has the figures). They are reported with WARN, not silently dropped: the
// check still runs and prints; a change that makes one hold shows up as a
// passing WARN, and the list and the README must then be updated.
struct KnownGap {
  const char* problem;
  const char* optimizer;  // "onebit_adam_no_ef" stands for the EF ablation
};
constexpr KnownGap kKnownGaps[] = {
    {"mlp", "onebit_adam"},
    {"mlp", "apmsqueeze"},
    {"mlp", "zero_one_adam"},
    {"mlp", "binsgdm"},
    // Convex and at its noise floor after 400 steps: EF on or off end level.
    {"logistic", "onebit_adam_no_ef"},
};

bool known_gap(const std::string& problem, const std::string& optimizer) {
  for (const auto& g : kKnownGaps) {
    if (problem == g.problem && optimizer == g.optimizer) return true;
  }
  return false;
}

void check_problem(const std::string& problem) {
  const Best adam = sweep(problem, "adam");
  std::printf("\n%s, n = 16: best final train_loss_full over lr in {0.001 ... 0.2}\n",
              problem.c_str());
  std::printf("  %-18s lr %-6g loss %.6f\n", "adam", adam.lr, adam.loss);
  // Adam without bias correction is what the 1-bit family's warm-up runs
  // (docs/algorithms.md §2): shown as a second reference, not checked.
  const Best adam_nbc = sweep(problem, "adam_no_bc");
  std::printf("  %-18s lr %-6g loss %.6f  (%+.2f%% vs adam; reference, not checked)\n",
              "adam no bias corr.", adam_nbc.lr, adam_nbc.loss,
              100 * (adam_nbc.loss / adam.loss - 1.0));
  // LAMB is the baseline 1-bit LAMB follows: shown, not checked against Adam.
  const Best lamb = sweep(problem, "lamb");
  std::printf("  %-18s lr %-6g loss %.6f  (%+.2f%% vs adam; baseline, not checked)\n", "lamb",
              lamb.lr, lamb.loss, 100 * (lamb.loss / adam.loss - 1.0));
  for (const char* opt :
       {"onebit_adam", "apmsqueeze", "onebit_lamb", "zero_one_adam", "loco", "binsgdm"}) {
    const Best b = sweep(problem, opt);
    const double rel = b.loss / adam.loss - 1.0;
    const bool gap = known_gap(problem, opt);
    std::printf(
        "  %-18s lr %-6g loss %.6f  (%+.2f%% vs adam, %+.2f%% vs adam without bias "
        "correction)%s\n",
        opt, b.lr, b.loss, 100 * rel, 100 * (b.loss / adam_nbc.loss - 1.0),
        gap ? "  known gap" : "");
    std::fflush(stdout);
    CAPTURE(opt);
    CAPTURE(b.loss);
    CAPTURE(adam.loss);
    if (gap) {
      WARN_MESSAGE(rel <= 0.02, "known gap: the claim did not hold here when measured");
    } else {
      CHECK(rel <= 0.02);
    }
  }
  // Error feedback off vs on, each at its own best lr. "Measurably worse":
  // more than 2 % above the error-compensated run, the same margin that
  // counts as "as good as Adam" above.
  const Best ef = sweep(problem, "onebit_adam");
  const Best no_ef = sweep(problem, "onebit_adam_no_ef");
  const bool gap = known_gap(problem, "onebit_adam_no_ef");
  std::printf("  %-18s lr %-6g loss %.6f  (%+.2f%% vs 1-bit Adam with EF)%s\n", "onebit_adam no EF",
              no_ef.lr, no_ef.loss, 100 * (no_ef.loss / ef.loss - 1.0), gap ? "  known gap" : "");
  if (gap) {
    WARN_MESSAGE(no_ef.loss > ef.loss * 1.02, "known gap: EF off is not worse here");
  } else {
    CHECK(no_ef.loss > ef.loss * 1.02);
  }
}

}  // namespace

TEST_SUITE("convergence") {
  TEST_CASE("logistic regression, n = 16: each optimizer within 2% of Adam; EF off worse") {
    check_problem("logistic");
  }
  TEST_CASE("MLP, n = 16: each optimizer within 2% of Adam; EF off worse") {
    check_problem("mlp");
  }
}
