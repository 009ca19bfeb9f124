// bitlab: the command line. Subcommands here: run, validate, list; the others
// (sweep, cost, recost, rate, plot, runs, report, calibrate, probe) in one file each
// (commands.hpp). Exit status (docs/design.md, "Command line"): 0 ok,
// 1 internal error, 2 bad input (file, flag or value), 3 the run diverged,
// 4 it could not write its results (a full disk), 128 + signal interrupted
// (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
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
#include "sim/cli/thread_limits.hpp"
#include "sim/comm/launcher.hpp"
#include "sim/comm/transport.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/error_feedback.hpp"
#include "sim/core/files.hpp"
#include "sim/core/human.hpp"
#include "sim/core/isa.hpp"
#include "sim/core/memory.hpp"
#include "sim/core/threads.hpp"
#include "sim/engine/catalogue.hpp"
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
  std::vector<std::string> unsets;
  RunOptions options;
  std::string backend = "sim";
  std::string resume_dir;
  bool twin = false;
  bool print_resolved = false;
  bool barrier_before_exchanges = false;
};

void add_set_option(CLI::App* sub, std::vector<std::string>& sets, const char* doc) {
  sub->add_option("--set", sets, doc)->expected(1)->allow_extra_args(false)->take_all();
}

void add_unset_option(CLI::App* sub, std::vector<std::string>& unsets) {
  sub->add_option("--unset", unsets,
                  "remove a setting of the file so its default applies: path (e.g. "
                  "optimizer.freeze_step); applied before --set")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
}

// What the configuration did that the user may not expect, said before the run.
void print_notes(const Experiment& e) {
  for (const auto& note : e.notes) std::fprintf(stderr, "bitlab: note: %s\n", note.c_str());
}

void add_run_commands(CLI::App& app, RunFlags& f) {
  f.run = app.add_subcommand("run", "run an experiment file; prints its results folder");
  f.run->add_option("file", f.file, "experiment JSON file (not with --resume)");
  add_set_option(f.run, f.sets, "override a setting: path=value (e.g. optimizer.lr=0.01)");
  add_unset_option(f.run, f.unsets);
  f.run->add_option("--out", f.options.out_dir,
                    "results folder (default: results/<name>/<optimizer>-seed<seed>)");
  f.run->add_option("--threads", f.options.threads, "OpenMP threads (default: all cores)")
      ->check(thread_count_check());
  f.run->add_flag("--quiet,-q", f.options.quiet, "no progress bar or summary on stderr");
  f.run
      ->add_option("--checkpoint-every", f.options.checkpoint_every,
                   "write the full state to <results>/checkpoint.bin every K steps and when a "
                   "signal stops the run (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  f.run->add_flag("--baseline-twin", f.twin,
                  "also run the optimizer's uncompressed twin into <results>/twin/ and report "
                  "the loss gap and byte and time ratios (the same as --set baseline=twin)");
  f.run->add_option("--resume", f.resume_dir,
                    "continue the interrupted or killed run in DIR from its checkpoint; its "
                    "metrics come out bit-identical to an uninterrupted run's");
  f.run
      ->add_option("--backend", f.backend,
                   "sim: one process emulates every worker; mpi: under mpirun, each rank "
                   "computes an equal block of workers and the collectives exchange their "
                   "messages over MPI (results bit-identical to sim; rank 0 writes them, with "
                   "transport.csv: measured vs modelled)")
      ->check(CLI::IsMember({"sim", "mpi"}));
  f.run->add_flag("--barrier-before-exchanges", f.barrier_before_exchanges,
                  "--backend mpi: every rank meets at a barrier before each exchange, so "
                  "transport.csv's mpi_comm_s counts the transfer alone (what the network model "
                  "prices) and mpi_wait_s_rank0 the waiting for the slowest rank; one barrier an "
                  "exchange (results unchanged)");

  f.validate = app.add_subcommand("validate", "check an experiment file without running it");
  f.validate->add_option("file", f.file, "experiment JSON file")->required();
  add_set_option(f.validate, f.sets, "override a setting: path=value");
  add_unset_option(f.validate, f.unsets);
  f.validate->add_flag("--print", f.print_resolved, "print the resolved experiment (all defaults)");
}

// `bitlab validate`: builds the problem and cluster too (shard rules depend on
// the data), prints a one-line summary.
int validate_experiment(const RunFlags& f) {
  Experiment exp = load_experiment(f.file, f.sets, f.unsets);
  print_notes(exp);
  Simulation sim(exp);
  // What `run` warns before its first step about these settings.
  for (const auto& w : sim.optimizer().warnings(exp.run.steps)) {
    std::fprintf(stderr, "bitlab: warning: %s\n", w.c_str());
  }
  if (f.print_resolved) std::printf("%s\n", exp.resolved.dump(2).c_str());
  std::fprintf(stderr, "%s: OK: problem %s (d = %zu), optimizer %s, %lld workers, %lld steps\n",
               f.file.c_str(), exp.problem.at("name").get<std::string>().c_str(),
               sim.cluster().dim(), exp.optimizer.at("name").get<std::string>().c_str(),
               static_cast<long long>(exp.cluster.workers), static_cast<long long>(exp.run.steps));
  std::fprintf(stderr,
               "  memory: at least %s: %s for the workers' gradients (%s) and the parameters, "
               "%s for the optimizer's state; this machine has %s\n",
               human_bytes(static_cast<double>(sim.cluster().memory_estimate())).c_str(),
               human_bytes(static_cast<double>(sim.cluster().memory_lower_bound())).c_str(),
               sim.cluster().streams_mean() ? "streamed into their mean: log n rows"
                                            : "a row per worker",
               human_bytes(static_cast<double>(sim.cluster().optimizer_bytes())).c_str(),
               human_bytes(static_cast<double>(machine_memory_bytes())).c_str());
  return 0;
}

// The experiment `bitlab run` runs: the file with its --set overrides, or the
// resumed folder's (whose config cannot change).
Experiment experiment_to_run(RunFlags& f) {
  if (f.resume_dir.empty()) {
    if (f.file.empty()) throw ConfigError("run: give an experiment file, or --resume DIR");
    if (f.twin) f.sets.push_back("baseline=twin");
    return load_experiment(f.file, f.sets, f.unsets);  // the run says its notes
  }
  if (!f.file.empty() || !f.sets.empty() || !f.unsets.empty() || !f.options.out_dir.empty()) {
    throw ConfigError(
        "--resume " + f.resume_dir +
        ": takes no experiment file, --set, --unset or --out (a resumed run continues "
        "with the configuration it was started with)");
  }
  f.options.out_dir = f.resume_dir;
  return experiment_to_resume(f.options);
}

// The MPI transport for `run --backend mpi`; refuses `run` under an MPI
// launcher without it (every process would run the whole simulation).
std::unique_ptr<Transport> make_transport(const RunFlags& f,
                                          const std::optional<LauncherRank>& launcher) {
  if (*f.run && f.backend == "mpi") {
    auto t = make_mpi_transport();
    t->set_barrier_before_moves(f.barrier_before_exchanges);
    return t;
  }
  if (*f.run && f.barrier_before_exchanges)
    throw ConfigError("--barrier-before-exchanges: only with --backend mpi (the simulator's "
                      "exchanges move nothing)", "--barrier-before-exchanges");
  if (*f.run && launcher) {
    throw ConfigError("--backend sim under an MPI launcher (" + std::to_string(launcher->size) +
                      " processes, " + launcher->source +
                      "): every process would run the whole simulation and write the same "
                      "results; add --backend mpi to split the workers over the ranks, or "
                      "run without mpirun");
  }
  return nullptr;
}

// CLI11 answers `bitlab frobnicate` with "A subcommand is required": name the
// word and the subcommands instead. Empty when argv[1] is a flag or known.
std::string unknown_subcommand_message(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->check_name(word)) return "";
    names.push_back(sub->get_name());
  }
  const std::string shown = word.size() > 40 ? word.substr(0, 37) + "..." : word;
  return "unknown subcommand \"" + shown + "\": " + one_of_message(word, names) +
         " (bitlab --help lists them)";
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists: may start the program again with a passive
  // OpenMP wait policy (sim/core/threads.hpp says why).
  ensure_passive_omp_wait(argv);
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
  const std::vector<Subcommand> extra = {
      add_cost_command(app), add_recost_command(app), add_calibrate_command(app), add_probe_command(app), add_sweep_command(app), add_rate_command(app),
      add_plot_command(app), add_runs_command(app),   add_report_command(app)};
  if (const std::string unknown = unknown_subcommand_message(app, argc, argv); !unknown.empty()) {
    std::fprintf(stderr, "bitlab: error: %s\n", unknown.c_str());
    return 2;
  }
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
    return run_experiment(experiment_to_run(flags), flags.options);
  } catch (const ConfigError& e) {
    if (reports()) std::fprintf(stderr, "bitlab: error: %s\n", e.what());
    return 2;
  } catch (const IoError& e) {
    // A full disk or a refused write (docs/experiments.md, exit statuses).
    std::fprintf(stderr, "bitlab: error: %s\n", e.what());
    if (transport && transport->ranks() > 1) transport->abort(kExitIoError);
    return kExitIoError;
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
