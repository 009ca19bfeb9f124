// `bitlab rate FILE.json --vary steps=100,200,400,800 [--vary cluster.workers=1,2,4,8]
// [--seeds K] [--set path=value] [--out DIR]`: the theory lab — runs the grid as a sweep, fits
// log(error) against log(T), log(n) and prints the fitted exponents beside
// the theorems' (docs/rate.md; the code: sim/lab/rate.hpp).
#include <memory>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/lab/rate.hpp"

namespace bitlab {

namespace {

struct RateFlags {
  std::string file;
  std::vector<std::string> vary;
  RateOptions options;
};

}  // namespace

Subcommand add_rate_command(CLI::App& app) {
  auto f = std::make_shared<RateFlags>();
  auto* cmd = app.add_subcommand(
      "rate",
      "the theory lab: run an experiment over steps T, workers n and seeds, fit log(error) "
      "against log(T) and log(n), and print the fitted exponents beside the theorems' "
      "(-1/2 in T; -1/2 in n, linear speed-up)");
  cmd->footer(
      "Output: results/<stem>-rate/ (or --out): the sweep's folder (sweep.json, run-NNN_*/, "
      "sweep.csv) with rate.csv (each run's error) and rate.json (the fit and its goodness: "
      "R^2, a lack-of-fit test, the local exponents; a curve that is not a power law is "
      "flagged NOT A POWER LAW).\n"
      "Exit status: 0 fitted; 3 some run did not complete (fitted without it) or too few "
      "finished to fit; 2 bad input (nothing created); 130 interrupted. docs/rate.md.");
  cmd->add_option("file", f->file, "experiment JSON file")->required();
  cmd->add_option("--vary", f->vary,
                  "path=v1,v2,... (at least 3 numbers > 0): a setting to vary and fit against, "
                  "e.g. steps=100,200,400,800 or cluster.workers=1,2,4,8; repeat for a grid")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all()
      ->required();
  cmd->add_option("--set", f->options.sets,
                  "override a setting of the file: path=value (e.g. optimizer.lr=0.01), as "
                  "bitlab run's")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--seeds", f->options.seeds,
                  "seeds 1..K per grid point; the confidence interval is over seeds (default 3)")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--metric", f->options.metric,
                  "the error: auto (suboptimality f(x) - f* when the problem knows its optimum, "
                  "else grad_norm2), suboptimality, grad_norm2 (squared norm of the workers' "
                  "mean gradient), train_loss")
      ->check(CLI::IsMember({"auto", "suboptimality", "grad_norm2", "train_loss"}));
  cmd->add_option("--tail", f->options.tail,
                  "the error is averaged over the last fraction of the steps (default 0.5)");
  cmd->add_option("--lr-scaling", f->options.lr_scaling,
                  "none (the file's lr), sqrt_n_over_T (lr = c*sqrt(n/T), c = the file's lr: "
                  "the step size of 1-bit Adam's and 0/1 Adam's theorems), inv_sqrt_T "
                  "(lr = c/sqrt(T))")
      ->check(CLI::IsMember({"none", "sqrt_n_over_T", "inv_sqrt_T"}));
  cmd->add_option("--out", f->options.out_dir, "folder (default: results/<stem>-rate)");
  cmd->add_option("--jobs,-j", f->options.jobs, "runs at once (default: the machine's cores)")
      ->check(CLI::Range(1, 4096));
  cmd->add_flag("--resume", f->options.resume,
                "finish an earlier rate run in the same folder (its finished runs are kept) "
                "and fit again");
  cmd->add_flag("--quiet,-q", f->options.quiet, "no progress on stderr");
  return {cmd, [f]() {
            for (const auto& v : f->vary) f->options.axes.push_back(parse_vary(v));
            return run_rate(f->file, f->options);
          }};
}

}  // namespace bitlab
