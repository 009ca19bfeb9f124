// bitlab: the command line. Subcommands: run, validate, list.
// Exit status: 0 ok, 1 internal error, 2 bad input (file, flag or value),
// 3 the run diverged, 130 interrupted.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/cli/commands.hpp"
#include "sim/comm/launcher.hpp"
#include "sim/comm/transport.hpp"
#include "sim/compress/compressor.hpp"
#include "sim/compress/error_feedback.hpp"
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

template <class T>
void print_fields(const std::vector<FieldInfo>& fields) {
  size_t w = 0, tw = 0, dw = 0;
  for (const auto& f : fields) {
    w = std::max(w, f.name.size());
    tw = std::max(tw, f.type.size());
    dw = std::max(dw, f.default_value.dump().size());
  }
  for (const auto& f : fields) {
    std::printf("    %-*s  %-*s  default %-*s  %s", static_cast<int>(w), f.name.c_str(),
                static_cast<int>(tw), f.type.c_str(), static_cast<int>(dw),
                f.default_value.dump().c_str(), f.doc.c_str());
    if (!f.rule.empty()) std::printf(" [%s]", f.rule.c_str());
    std::printf("\n");
  }
}

Json fields_json(const std::vector<FieldInfo>& fields) {
  Json a = Json::array();
  for (const auto& f : fields) {
    a.push_back({{"name", f.name},
                 {"type", f.type},
                 {"default", f.default_value},
                 {"rule", f.rule},
                 {"doc", f.doc}});
  }
  return a;
}

int cmd_list(bool as_json) {
  const auto run_fields = RunSettings::schema().describe();
  const auto cluster_fields = ClusterOptions::schema().describe();
  if (as_json) {
    Json j = Json::object();
    j["experiment"] = fields_json(run_fields);
    j["cluster"] = fields_json(cluster_fields);
    for (const auto& e : problem_registry()) {
      j["problems"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
    }
    for (const auto& e : optimizer_registry()) {
      j["optimizers"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
    }
    for (const auto& e : compressor_registry()) {
      j["compressors"][e.name] = {{"summary", e.summary}, {"options", fields_json(e.fields)}};
    }
    j["error_feedback"] = fields_json(ErrorFeedbackOptions::schema().describe());
    j["network"] = fields_json(NetworkOptions::schema().describe());
    j["compute"] = fields_json(ComputeOptions::schema().describe());
    for (const auto& p : network_presets()) {
      j["network_presets"][p.name] = {{"gpus_per_node", p.gpus_per_node},
                                      {"intra_latency_us", p.intra_latency_us},
                                      {"intra_bandwidth_gbps", p.intra_bandwidth_gbps},
                                      {"inter_latency_us", p.inter_latency_us},
                                      {"inter_bandwidth_gbps", p.inter_bandwidth_gbps},
                                      {"source", p.source}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("bitlab %s (%s)\n\n", bitlab_version(), bitlab_git_revision());
  std::printf("EXPERIMENT (top level of the JSON file)\n");
  print_fields<RunSettings>(run_fields);
  std::printf("    problem    object     (required) {\"name\": <problem>, options...}\n");
  std::printf("    cluster    object     the simulated cluster, below\n");
  std::printf("    optimizer  object     (required) {\"name\": <optimizer>, options...}\n");
  std::printf("\nCLUSTER (\"cluster\": {...})\n");
  print_fields<ClusterOptions>(cluster_fields);
  std::printf("\nPROBLEMS (\"problem\": {\"name\": ..., ...})\n");
  for (const auto& e : problem_registry()) {
    std::printf("  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields<void>(e.fields);
  }
  std::printf("\nOPTIMIZERS (\"optimizer\": {\"name\": ..., ...})\n");
  for (const auto& e : optimizer_registry()) {
    std::printf("  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields<void>(e.fields);
  }
  std::printf("\nCOMPRESSORS (used inside the optimizers' collectives; {\"name\": ..., ...})\n");
  for (const auto& e : compressor_registry()) {
    std::printf("  %s: %s\n", e.name.c_str(), e.summary.c_str());
    print_fields<void>(e.fields);
  }
  std::printf("\nERROR FEEDBACK (per-worker error buffers of a compressed exchange)\n");
  print_fields<void>(ErrorFeedbackOptions::schema().describe());
  std::printf("\nNETWORK (\"network\": {...}; the time model)\n");
  print_fields<void>(NetworkOptions::schema().describe());
  std::printf("  presets (latency us / bandwidth Gbit/s, intra | inter-node NIC):\n");
  for (const auto& p : network_presets()) {
    std::printf("    %-22s %d GPUs/node  intra %g us %g Gbps | inter %g us %g Gbps\n      %s\n",
                p.name.c_str(), p.gpus_per_node, p.intra_latency_us, p.intra_bandwidth_gbps,
                p.inter_latency_us, p.inter_bandwidth_gbps, p.source.c_str());
  }
  std::printf("\nCOMPUTE (\"compute\": {...}; compute time per step for the time model)\n");
  print_fields<void>(ComputeOptions::schema().describe());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "bitlab: a simulator and convergence lab for communication-compressed "
      "distributed optimizers"};
  app.require_subcommand(1);
  app.set_version_flag(
      "--version", std::string("bitlab ") + bitlab_version() + " (" + bitlab_git_revision() + ")");

  std::string file;
  std::vector<std::string> sets;
  RunCliOptions run_opts;
  auto* run = app.add_subcommand("run", "run an experiment file; prints its results folder");
  run->add_option("file", file, "experiment JSON file")->required();
  run->add_option("--set", sets, "override a setting: path=value (e.g. optimizer.lr=0.01)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  run->add_option("--out", run_opts.out_dir,
                  "results folder (default: results/<name>/<optimizer>-seed<seed>)");
  run->add_option("--threads", run_opts.threads, "OpenMP threads (default: all cores)")
      ->check(CLI::Range(1, 4096));
  run->add_flag("--quiet,-q", run_opts.quiet, "no progress bar or summary on stderr");
  std::string backend = "sim";
  run->add_option("--backend", backend,
                  "sim: one process emulates every worker; mpi: under mpirun, each rank "
                  "computes an equal block of workers and the collectives exchange their "
                  "messages over MPI (results bit-identical to sim; rank 0 writes them, with "
                  "transport.csv: measured vs modelled)")
      ->check(CLI::IsMember({"sim", "mpi"}));

  bool print_resolved = false;
  auto* validate = app.add_subcommand("validate", "check an experiment file without running it");
  validate->add_option("file", file, "experiment JSON file")->required();
  validate->add_option("--set", sets, "override a setting: path=value")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  validate->add_flag("--print", print_resolved, "print the resolved experiment (all defaults)");

  bool list_json = false;
  auto* list = app.add_subcommand("list", "every problem and optimizer with its options");
  list->add_flag("--json", list_json, "machine-readable output");

  const std::vector<Subcommand> extra = {add_cost_command(app), add_recost_command(app),
                                         add_sweep_command(app), add_plot_command(app)};

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
    if (*run && backend == "mpi") {
      transport = make_mpi_transport();
      run_opts.transport = transport.get();
    } else if (*run && launcher) {
      throw ConfigError("--backend sim under an MPI launcher (" + std::to_string(launcher->size) +
                        " processes, " + launcher->source +
                        "): every process would run the whole simulation and write the same "
                        "results; add --backend mpi to split the workers over the ranks, or "
                        "run without mpirun");
    }
    if (*list) return cmd_list(list_json);
    for (const auto& sub : extra) {
      if (*sub.app) return sub.run();
    }
    Experiment exp = load_experiment(file, sets);
    if (*validate) {
      // Build the problem and cluster too: shard rules depend on the data.
      Simulation sim(exp);
      if (print_resolved) std::printf("%s\n", exp.resolved.dump(2).c_str());
      std::fprintf(stderr, "%s: OK: problem %s (d = %zu), optimizer %s, %lld workers, %lld steps\n",
                   file.c_str(), exp.problem.at("name").get<std::string>().c_str(),
                   sim.cluster().dim(), exp.optimizer.at("name").get<std::string>().c_str(),
                   static_cast<long long>(exp.cluster.workers),
                   static_cast<long long>(exp.run.steps));
      return 0;
    }
    run_opts.command_line = joined_command(argc, argv);
    return run_experiment(exp, run_opts);
  } catch (const ConfigError& e) {
    if (reports()) std::fprintf(stderr, "bitlab: error: %s\n", e.what());
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
