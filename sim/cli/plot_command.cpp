// `bitlab plot RUN_OR_SWEEP_DIR... [--metric M] [--x X] [--out PREFIX] [--title T]
// [--logx | --linx] [--logy] [--where PATH=VALUE]... [--smooth N]`: a thin wrapper that runs
// notebooks/plot.py with Debian's /usr/bin/python3 (and its python3-matplotlib)
// and passes its exit status through (sim/cli/python_script.hpp). The script
// does the work (finding runs, labels, seed bands, colours, PNG/SVG/PDF) and
// checks its input before importing matplotlib.
#include <memory>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/cli/python_script.hpp"

namespace bitlab {

namespace {

struct PlotFlags {
  std::vector<std::string> dirs;
  std::string metric, x, out, title;
  std::vector<std::string> where;
  int smooth = 0;
  bool logx = false;
  bool linx = false;
  bool logy = false;
};

int run_plot(const PlotFlags& f) {
  // Options as --name=value and the folders after "--", so that a value or a
  // folder starting with '-' is never read as a flag by argparse.
  std::vector<std::string> args;
  auto option = [&](const char* name, const std::string& value) {
    if (!value.empty()) args.push_back(std::string(name) + "=" + value);
  };
  option("--metric", f.metric);
  option("--x", f.x);
  option("--out", f.out);
  option("--title", f.title);
  if (f.logx) args.emplace_back("--logx");
  if (f.linx) args.emplace_back("--linx");
  if (f.logy) args.emplace_back("--logy");
  for (const auto& w : f.where) option("--where", w);
  if (f.smooth != 0) option("--smooth", std::to_string(f.smooth));
  args.emplace_back("--");
  args.insert(args.end(), f.dirs.begin(), f.dirs.end());
  return run_python_script("plot.py", args, "python3-matplotlib");
}

}  // namespace

Subcommand add_plot_command(CLI::App& app) {
  auto f = std::make_shared<PlotFlags>();
  auto* cmd = app.add_subcommand(
      "plot",
      "loss against step, simulated time and bytes sent for runs and sweeps (PNG, SVG and PDF), "
      "via "
      "notebooks/plot.py and /usr/bin/python3 with python3-matplotlib");
  cmd->footer(
      "A DIR is a run folder, a sweep folder or a folder of run folders. Curves are labelled by "
      "the config values that differ between runs; runs differing only by seed are drawn as "
      "their mean with a min-max band. Numeric swept values get an ordered colormap, a second "
      "factor line styles; runs that diverged or blew up are cut there, marked with X and kept "
      "out of the y limits. The script is $BITLAB_NOTEBOOKS/plot.py, else "
      "<bitlab binary's folder>/../notebooks/plot.py.");
  cmd->add_option("dirs", f->dirs, "run folders, sweep folders or folders of runs")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--metric", f->metric,
                  "metrics.csv column on y (default train_loss; e.g. eval_loss, "
                  "train_loss_full, suboptimality)");
  cmd->add_option("--x", f->x,
                  "x axis: step, sim_time_s, bytes_sent_cum, another metrics.csv column, or all "
                  "(default: all; sim_time_s only when the runs have it)");
  cmd->add_option("--out", f->out,
                  "write PREFIX.png, PREFIX.svg and PREFIX.pdf (default: FIRST_DIR/plot, or "
                  "FIRST_DIR/plot-METRIC)");
  cmd->add_option("--title", f->title, "figure title");
  auto* logx = cmd->add_flag("--logx", f->logx,
                             "logarithmic x axes (points at x <= 0 left out): a warm-up's bytes "
                             "no longer squash the compressed phase into a line");
  cmd->add_flag("--linx", f->linx,
                "linear x axes throughout (by default the bytes axis is logarithmic when a run "
                "changes phase)")
      ->excludes(logx);
  cmd->add_flag("--logy", f->logy, "logarithmic y axis");
  cmd->add_option("--where", f->where,
                  "keep only runs whose config has PATH=VALUE (PATH may be its last part, e.g. "
                  "freeze_step=120); repeatable, a path given twice accepts either value")
      ->allow_extra_args(false);
  cmd->add_option("--smooth", f->smooth,
                  "exponential moving average over N points (alpha = 2/(N+1)), stated on the "
                  "figure")
      ->check(CLI::NonNegativeNumber);
  return {cmd, [f]() { return run_plot(*f); }};
}

}  // namespace bitlab
