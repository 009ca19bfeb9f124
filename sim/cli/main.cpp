// bitlab: the command line. Subcommands: run, validate, list.
// Exit status: 0 ok, 1 internal error, 2 bad input (file, flag or value),
// 3 the run diverged, 130 interrupted.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/cli/commands.hpp"
#include "sim/comm/launcher.hpp"
#include "sim/comm/transport.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/error_feedback.hpp"
#include "sim/core/human.hpp"
#include "sim/core/isa.hpp"
#include "sim/core/memory.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/timing/network.hpp"

using namespace bitlab;

namespace {

std::string joined_command(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) s += (i ? " " : "") + std::string(argv[i]);
  return s;
}
// The flags of `run` and `validate` (main.cpp's own subcommands).
struct RunFlags {
  CLI::App* run = nullptr;
  CLI::App* validate = nullptr;
  std::string file;
  std::vector<std::string> sets;
  RunCliOptions options;
  std::string backend = "sim";
  bool print_resolved = false;
};

void add_set_option(CLI::App* sub, std::vector<std::string>& sets, const char* doc) {
  sub->add_option("--set", sets, doc)->expected(1)->allow_extra_args(false)->take_all();
}

void add_run_commands(CLI::App& app, RunFlags& f) {
  f.run = app.add_subcommand("run", "run an experiment file; prints its results folder");
  f.run->add_option("file", f.file, "experiment JSON file")->required();
  add_set_option(f.run, f.sets, "override a setting: path=value (e.g. optimizer.lr=0.01)");
  f.run->add_option("--out", f.options.out_dir,
                    "results folder (default: results/<name>/<optimizer>-seed<seed>)");
  f.run->add_option("--threads", f.options.threads, "OpenMP threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  f.run->add_flag("--quiet,-q", f.options.quiet, "no progress bar or summary on stderr");
  f.run
      ->add_option("--backend", f.backend,
                   "sim: one process emulates every worker; mpi: under mpirun, each rank "
                   "computes an equal block of workers and the collectives exchange their "
                   "messages over MPI (results bit-identical to sim; rank 0 writes them, with "
                   "transport.csv: measured vs modelled)")
      ->check(CLI::IsMember({"sim", "mpi"}));

  f.validate = app.add_subcommand("validate", "check an experiment file without running it");
  f.validate->add_option("file", f.file, "experiment JSON file")->required();
  add_set_option(f.validate, f.sets, "override a setting: path=value");
  f.validate->add_flag("--print", f.print_resolved, "print the resolved experiment (all defaults)");
}

// `bitlab validate`: builds the problem and cluster too (shard rules depend on
// the data), prints a one-line summary.
int validate_experiment(const RunFlags& f) {
  Experiment exp = load_experiment(f.file, f.sets);
  Simulation sim(exp);
  if (f.print_resolved) std::printf("%s\n", exp.resolved.dump(2).c_str());
  std::fprintf(stderr, "%s: OK: problem %s (d = %zu), optimizer %s, %lld workers, %lld steps\n",
               f.file.c_str(), exp.problem.at("name").get<std::string>().c_str(),
               sim.cluster().dim(), exp.optimizer.at("name").get<std::string>().c_str(),
               static_cast<long long>(exp.cluster.workers), static_cast<long long>(exp.run.steps));
  std::fprintf(stderr,
               "  memory: at least %s for the workers' gradients and the parameters (the "
               "optimizer's state comes on top); this machine has %s\n",
               human_bytes(static_cast<double>(sim.cluster().memory_lower_bound())).c_str(),
               human_bytes(static_cast<double>(machine_memory_bytes())).c_str());
  return 0;
}

// The MPI transport for `run --backend mpi`; refuses `run` under an MPI
// launcher without it (every process would run the whole simulation).
std::unique_ptr<Transport> make_transport(const RunFlags& f,
                                          const std::optional<LauncherRank>& launcher) {
  if (*f.run && f.backend == "mpi") return make_mpi_transport();
  if (*f.run && launcher) {
    throw ConfigError("--backend sim under an MPI launcher (" + std::to_string(launcher->size) +
                      " processes, " + launcher->source +
                      "): every process would run the whole simulation and write the same "
                      "results; add --backend mpi to split the workers over the ranks, or "
                      "run without mpirun");
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bitlab: a simulator and convergence lab for communication-compressed "
      "distributed optimizers"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", std::string("bitlab ") + bitlab_version() + " (" + bitlab_git_revision() + ")");
  RunFlags flags;
  add_run_commands(app, flags);
  bool list_json = false;
  auto* list = app.add_subcommand("list", "every problem and optimizer with its options");
  list->add_flag("--json", list_json, "machine-readable output");
  const std::vector<Subcommand> extra = {add_cost_command(app),  add_recost_command(app),
                                         add_sweep_command(app), add_plot_command(app),
                                         add_runs_command(app),  add_report_command(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;  // help/version: 0; any bad flag: 2
  }

  // Made before anything can fail, so that every rank fails alike and only
  // rank 0 reports (a config error is the same on every rank).
  // Started by mpirun without the MPI backend, every process gets the same
  // error: only the launcher's rank 0 prints it.
  std::unique_ptr<Transport> transport;
  const auto launcher = mpi_launcher_rank();
  const auto reports = [&transport, &launcher] {
    return transport ? transport->rank() == 0 : !launcher || launcher->rank == 0;
  };
  try {
    // BITLAB_ISA is read here, once, so that a bad value is a clear error before
    // any work (and never thrown from inside a parallel region).
    (void)active_isa();
    transport = make_transport(flags, launcher);
    flags.options.transport = transport.get();
    if (*list) {
      std::printf("%s", list_json ? (list_options_json().dump(2) + "\n").c_str()
                                  : format_list_options().c_str());
      return 0;
    }
    for (const auto& sub : extra) {
      if (*sub.app) return sub.run();
    }
    if (*flags.validate) return validate_experiment(flags);
    flags.options.command_line = joined_command(argc, argv);
    return run_experiment(load_experiment(flags.file, flags.sets), flags.options);
  } catch (const ConfigError& e) {
    if (reports()) std::fprintf(stderr, "bitlab: error: %s\n", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // What the memory check before the large buffers cannot foresee (the
    // problem's own data, the optimizer's state): still a clear refusal.
    std::fprintf(stderr,
                 "bitlab: error: out of memory: the run needs more than this machine's %s "
                 "(bitlab validate prints a lower bound); use fewer workers or a smaller "
                 "problem\n",
                 human_bytes(static_cast<double>(machine_memory_bytes())).c_str());
    if (transport && transport->ranks() > 1) transport->abort(2);
    return 2;
  } catch (const std::exception& e) {
    // Not necessarily seen by every rank: print it here and end all ranks.
    if (transport && transport->ranks() > 1) {
      std::fprintf(stderr, "bitlab: internal error on rank %d: %s\n", transport->rank(), e.what());
      transport->abort(1);
    }
    std::fprintf(stderr, "bitlab: internal error: %s\n", e.what());
    return 1;
  }
}
