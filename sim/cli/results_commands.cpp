// `bitlab runs [DIR] [--csv|--json]` and `bitlab report DIR [--out FILE]
// [--baseline RUN|PATH=VALUE[,PATH=VALUE...]]... [--metric M]`: the overview of a results tree and its interactive page.
// Thin wrappers around notebooks/runs.py and notebooks/report.py, run with
// Debian's /usr/bin/python3 (sim/cli/python_script.hpp); they read run and
// sweep folders with notebooks/plot.py's functions.
#include <memory>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/cli/python_script.hpp"

namespace bitlab {

namespace {

struct RunsFlags {
  std::string dir = "results";
  bool csv = false, json = false;
};

struct ReportFlags {
  std::string dir, out, title, metric;
  std::vector<std::string> baseline;
};

}  // namespace

Subcommand add_runs_command(CLI::App& app) {
  auto f = std::make_shared<RunsFlags>();
  auto* cmd = app.add_subcommand(
      "runs",
      "a table of the runs under a results tree (via notebooks/runs.py and /usr/bin/python3)");
  cmd->footer(
      "Lists every run folder (one holding metrics.csv) at most four levels below DIR: name, "
      "optimizer, key options, status, steps, final metrics, bytes sent per worker, simulated "
      "time, wall time and the run's warnings (a count, the text under the table; --csv: one "
      "cell joined by \" | \"). The table shows bytes and times for people (kB/MB/GB, ms/s/min/h); "
      "--csv and --json keep raw numbers (bytes, seconds).");
  cmd->add_option("dir", f->dir,
                  "a results tree, a sweep folder or a run folder (default results)");
  auto* csv = cmd->add_flag("--csv", f->csv, "comma-separated values with raw numbers");
  cmd->add_flag("--json", f->json, "a JSON array with raw numbers")->excludes(csv);
  return {cmd, [f]() {
            std::vector<std::string> args;
            if (f->csv) args.emplace_back("--csv");
            if (f->json) args.emplace_back("--json");
            args.emplace_back("--");
            args.push_back(f->dir);
            return run_python_script("runs.py", args, "python3");
          }};
}

Subcommand add_report_command(CLI::App& app) {
  auto f = std::make_shared<ReportFlags>();
  auto* cmd = app.add_subcommand(
      "report",
      "one self-contained report.html for a run, a sweep or a results tree: sortable runs table, "
      "interactive curves, phases, communication (via notebooks/report.py and python3-plotly)");
  cmd->footer(
      "The page embeds plotly.js (Debian's python3-plotly) and the data: it opens from disk "
      "without a server or network. With --baseline, the runs table gives each run's speed-up "
      "(the baseline's simulated time, else bytes, over the run's; \"comm-only\" when no run "
      "models compute) and loss gap (final train_loss minus the baseline's). See "
      "docs/results.md.");
  cmd->add_option("dir", f->dir, "a run folder, a sweep folder or a results tree")->required();
  cmd->add_option("--out", f->out, "the page to write (default DIR/report.html)");
  cmd->add_option("--baseline", f->baseline,
                  "the runs the others are compared with: a run folder's path below DIR, or "
                  "PATH=VALUE pairs on the config that the runs all match (repeat the flag, or "
                  "join them with commas: optimizer.name=adam,optimizer.bias_correction=false; "
                  "several runs: their mean)")
      ->allow_extra_args(false);
  cmd->add_option("--title", f->title, "page title (default: the sweep's or folder's name)");
  cmd->add_option("--metric", f->metric,
                  "metrics.csv column of the curves (default train_loss; e.g. train_loss_full)");
  return {cmd, [f]() {
            std::vector<std::string> args;
            if (!f->out.empty()) args.push_back("--out=" + f->out);
            for (const auto& b : f->baseline) args.push_back("--baseline=" + b);
            if (!f->title.empty()) args.push_back("--title=" + f->title);
            if (!f->metric.empty()) args.push_back("--metric=" + f->metric);
            args.emplace_back("--");
            args.push_back(f->dir);
            return run_python_script("report.py", args, "python3-plotly");
          }};
}

}  // namespace bitlab
