// Subcommands of `bitlab` that live outside main.cpp: each adds its CLI11
// subcommand with its flags and returns the function that runs it (called
// when the subcommand was given; returns the exit status; throws ConfigError
// for bad input, which main() reports with exit status 2).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "sim/core/schema.hpp"

namespace bitlab {

struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

// `bitlab cost`: price a training job without training it (sim/cli/cost_command.cpp).
Subcommand add_cost_command(CLI::App& app);
// `bitlab recost RUN_DIR --network ...`: re-price a finished run (sim/cli/recost_command.cpp).
Subcommand add_recost_command(CLI::App& app);
// `bitlab sweep FILE.json [--jobs N] [--resume]`: a grid of runs (sim/cli/sweep_command.cpp).
Subcommand add_sweep_command(CLI::App& app);
// `bitlab rate FILE.json --vary steps=...`: fitted convergence exponents
// (sim/cli/rate_command.cpp).
Subcommand add_rate_command(CLI::App& app);
// `bitlab calibrate FILE...`: fit the network model to measured collective
// times and write a network file (sim/cli/calibrate_command.cpp).
Subcommand add_calibrate_command(CLI::App& app);
// `mpirun -np N bitlab probe`: time the collectives on this cluster and write
// probe.json for calibrate (sim/cli/probe_command.cpp).
Subcommand add_probe_command(CLI::App& app);
// `bitlab plot RUN_OR_SWEEP_DIR...`: figures via notebooks/plot.py (sim/cli/plot_command.cpp).
Subcommand add_plot_command(CLI::App& app);
// `bitlab runs [DIR]`: a table of runs; `bitlab report DIR`: report.html
// (sim/cli/results_commands.cpp).
Subcommand add_runs_command(CLI::App& app);
Subcommand add_report_command(CLI::App& app);

}  // namespace bitlab
