// After the last step of a run: summary.json, the report on stderr and
// the exit status (run_parts.hpp).
#include "sim/engine/run_parts.hpp"

#include "sim/core/human.hpp"
#include "sim/core/memory.hpp"

namespace bitlab::run_parts {

// run_diagnostics.cpp: after a completed run, on rank 0, the warnings about
// a run that went wrong without diverging (its loss rising, far above its
// twin's) or whose simulated communication is slower than its twin's.
std::vector<std::string> end_of_run_warnings(const RunContext& run, const RunTally& tally,
                                             const Json& summary);

namespace {

Json final_metrics(const RunContext& run, const RunTally& tally) {
  Json fin = Json::object();
  fin["train_loss"] = finite_or_null(tally.last.train_loss);
  fin["grad_norm"] = finite_or_null(tally.last.grad_norm);
  fin["eval_step"] = tally.last_eval_step;
  for (size_t k = 0; k < run.eval_cols.size(); ++k) {
    fin[run.eval_cols[k]] = finite_or_null(tally.last_eval[k]);
  }
  return fin;
}

Json phase_totals(const RunTally& tally, bool timed) {
  Json ph = Json::object();
  for (const auto& [name, v] : tally.phases) {
    ph[name] = {{"steps", v.steps}, {"bytes_sent_per_worker", v.bytes}};
    if (timed) {
      ph[name]["compute_s"] = v.compute_s;
      ph[name]["comm_s"] = v.comm_s;
      ph[name]["step_s_mean"] = v.steps ? (v.compute_s + v.comm_s) / v.steps : 0.0;
    }
  }
  return ph;
}

// The network model's view of the run (only with a network model).
Json simulated_time(const RunContext& run, const RunTally& tally) {
  const Topology& t = *run.sim.topology();
  const StepMetrics& last = tally.last;
  double samples = 0;
  for (int i = 0; i < run.sim.cluster().workers(); ++i) {
    samples += compute_samples(run.sim.cluster().batch_samples(i));
  }
  double compute_s = 0, comm_s = 0;
  for (const auto& [name, v] : tally.phases) {
    compute_s += v.compute_s;
    comm_s += v.comm_s;
  }
  return {{"network", t.name},
          {"nodes", t.nodes},
          {"gpus_per_node", t.gpus_per_node},
          {"sim_time_s", last.sim_time_s},
          {"samples_per_s", last.sim_time_s > 0 ? samples * last.step / last.sim_time_s : 0.0},
          {"compute_s", compute_s},
          {"comm_s", comm_s},
          // No compute model (no compute section, or one that costs nothing):
          // the simulated time is the communication's alone.
          {"communication_only", compute_s == 0.0}};
}

// The MPI backend's measurements. Every rank takes part (a max over ranks).
Json measured_totals(const RunContext& run, const MeasuredTotals& totals) {
  // Training samples whose features each rank holds (its workers' shards;
  // rank 0 also the first train_eval_samples it evaluates on).
  const size_t held = run.sim.problem().held_train_samples();
  const auto held_others =
      static_cast<size_t>(run.transport.max(run.writer ? 0.0 : static_cast<double>(held)));
  return {{"backend", run.transport.name()},
          {"ranks", run.transport.ranks()},
          {"wall_step_s_sum", totals.wall_s},
          {"mpi_bytes_rank0", totals.bytes_rank0},
          {"mpi_bytes_all_ranks", totals.bytes_all},
          {"mpi_calls_rank0", totals.calls_rank0},
          {"mpi_comm_s_rank0", totals.comm_s_rank0},
          {"mpi_wait_s_rank0", totals.wait_s_rank0},
          // Per-worker gradient / local-parameter buffers
          // rank 0 holds: its block of workers only.
          {"cluster_worker_buffer_bytes_rank0", run.sim.cluster().worker_buffer_bytes()},
          // The optimizer's per-worker rows rank 0 holds (its block of workers,
          // the rows of the collectives it owns included).
          {"optimizer_worker_state_bytes_rank0", run.sim.optimizer().held_worker_state_bytes()},
          {"train_samples", run.sim.problem().num_train()},
          {"train_samples_held_rank0", held},
          {"train_samples_held_max_other_rank", held_others}};
}

// What the run held in memory (this process; under MPI, rank 0's).
Json memory_summary(const RunContext& run) {
  const Cluster& cluster = run.sim.cluster();
  return {{"peak_resident_bytes", peak_resident_bytes()},
          // streamed_mean: each gradient folded into the mean as computed
          // (Optimizer::gradient_mean_wire); rows: n × d gradient rows held
          {"gradients", cluster.streams_mean() ? "streamed_mean" : "rows"},
          {"cluster_buffer_bytes", cluster.worker_buffer_bytes()},
          {"optimizer_worker_state_bytes", run.sim.optimizer().held_worker_state_bytes()}};
}

// summary.json. Built on every rank: under MPI it gathers over the ranks.
Json make_summary(const RunContext& run, const RunTally& tally) {
  const Experiment& e = run.experiment;
  const StepMetrics& last = tally.last;
  Json summary = Json::object();
  summary["status"] = run_status_name(tally.status);
  summary["experiment"] = e.run.name;
  summary["problem"] = e.problem.at("name");
  summary["optimizer"] = e.optimizer.at("name");
  summary["workers"] = e.cluster.workers;
  summary["seed"] = e.run.seed;
  summary["steps_planned"] = e.run.steps;
  summary["steps_completed"] = last.step;
  if (tally.resumed_from_step > 0) summary["resumed_from_step"] = tally.resumed_from_step;
  if (tally.status == RunStatus::kDiverged) summary["divergence"] = tally.divergence;
  if (tally.status == RunStatus::kInterrupted) {
    // Signal 0: a driven run (RunSession) closed before its last step.
    summary["signal"] = tally.signal != 0 ? signal_name(tally.signal) : "none (closed early)";
  }
  if (tally.status == RunStatus::kFailed) summary["failure"] = tally.failure;
  summary["warnings"] = tally.warnings;
  summary["final"] = final_metrics(run, tally);
  const auto opt = run.sim.problem().optimal_loss();
  summary["optimal_loss"] = opt ? Json(*opt) : Json(nullptr);
  summary["totals"] = {{"bytes_sent_per_worker", last.bytes_sent_cum},
                       {"messages_per_worker", last.messages_cum},
                       {"collectives", run.sim.collectives()}};
  summary["phases"] = phase_totals(tally, run.timed);
  summary["dim"] = run.sim.cluster().dim();
  if (run.timed) summary["time"] = simulated_time(run, tally);
  summary["wall_s"] = tally.wall_s;
  summary["memory"] = memory_summary(run);
  if (run.measured) summary["measured"] = measured_totals(run, tally.measured);
  summary["steps_per_s"] = tally.wall_s > 0 ? last.step / tally.wall_s : 0.0;
  summary["bitlab_version"] = bitlab_version();
  summary["git_revision"] = bitlab_git_revision();
  summary["finished_utc"] = utc_now();
  return summary;
}

// A line of the report: the run against its twin (summary.json's
// "baseline"), so that the gap is read where the run's own figures are.
void report_baseline(const RunContext& run, const Json& baseline) {
  if (!baseline.is_object()) return;
  // 1-bit Adam's twin is 1-bit Adam with compression none: say "uncompressed".
  const std::string twin = baseline["optimizer"].get<std::string>();
  const bool same_name = twin == run.experiment.optimizer.value("name", "");
  std::fprintf(stderr, "  vs its twin (%s%s, in twin/):", same_name ? "uncompressed " : "",
               twin.c_str());
  for (const auto& [key, gap] : baseline["gap"].items()) {
    if (key == "grad_norm") continue;
    std::fprintf(stderr, " %s %+.4g", key.c_str(), gap.get<double>());
  }
  if (baseline["bytes_ratio"].is_number()) {
    std::fprintf(stderr, "; bytes x%.3g", baseline["bytes_ratio"].get<double>());
  }
  if (baseline["speedup"].is_number()) {
    std::fprintf(stderr, "; speed-up %.3gx", baseline["speedup"].get<double>());
  }
  std::fprintf(stderr, "\n");
}

void report(const RunContext& run, const RunTally& tally, const Json& baseline) {
  if (run.options.quiet) return;
  const StepMetrics& last = tally.last;
  const double wall = tally.wall_s;
  std::fprintf(stderr, "%s: %s, %lld/%lld steps in %.2f s (%.0f steps/s)\n",
               run.experiment.run.name.c_str(), run_status_name(tally.status),
               static_cast<long long>(last.step), static_cast<long long>(run.experiment.run.steps),
               wall, wall > 0 ? last.step / wall : 0.0);
  std::fprintf(stderr, "  train_loss %.6g", last.train_loss);
  for (size_t k = 0; k < run.eval_cols.size(); ++k) {
    std::fprintf(stderr, "  %s %.6g", run.eval_cols[k].c_str(), tally.last_eval[k]);
  }
  if (!run.eval_cols.empty() && tally.last_eval_step == 0) {
    std::fprintf(stderr, " (not evaluated)");
  } else if (!run.eval_cols.empty() && tally.last_eval_step != last.step) {
    // An interrupted run's last evaluation is older than its last step.
    std::fprintf(stderr, " (evaluated at step %lld)", static_cast<long long>(tally.last_eval_step));
  }
  std::fprintf(stderr, "\n  sent %s per worker in %zu collectives",
               human_bytes(last.bytes_sent_cum).c_str(), run.sim.collectives());
  if (run.timed) {
    double compute_s = 0;
    for (const auto& [name, v] : tally.phases) compute_s += v.compute_s;
    std::fprintf(stderr, ", simulated time %s%s", human_duration(last.sim_time_s).c_str(),
                 compute_s == 0.0 ? " (communication only: no compute model)" : "");
  }
  std::fprintf(stderr, "\n");
  if (tally.status == RunStatus::kDiverged) {
    std::fprintf(stderr, "  diverged at step %lld: %s\n  %s\n", static_cast<long long>(last.step),
                 tally.divergence["what"].get<std::string>().c_str(),
                 tally.divergence["hint"].get<std::string>().c_str());
  }
  report_baseline(run, baseline);
  std::fprintf(stderr, "  results: %s\n", run.dir.c_str());
}

// 0 completed, 3 diverged, 128 + the signal when interrupted (130 for Ctrl-C,
// 143 for SIGTERM, 129 for SIGHUP), as a shell reports a process the signal
// ended.
int exit_status_of(const RunTally& tally) {
  return tally.status == RunStatus::kDiverged      ? 3
         : tally.status == RunStatus::kFailed      ? kExitIoError
         : tally.status == RunStatus::kInterrupted ? 128 + tally.signal
                                         : 0;
}

}  // namespace

}  // namespace bitlab::run_parts

namespace bitlab {

const char* run_status_name(RunStatus status) {
  switch (status) {
    case RunStatus::kCompleted:
      return "completed";
    case RunStatus::kDiverged:
      return "diverged";
    case RunStatus::kInterrupted:
      return "interrupted";
    case RunStatus::kFailed:
      return "failed";
  }
  return "?";
}

std::optional<RunStatus> run_status_from_name(const std::string& name) {
  for (const RunStatus s :
       {RunStatus::kCompleted, RunStatus::kDiverged, RunStatus::kInterrupted, RunStatus::kFailed}) {
    if (name == run_status_name(s)) return s;
  }
  return std::nullopt;
}

}  // namespace bitlab

namespace bitlab::run_parts {

// The exit status of a run that ended as `summary` says (exit_status_of's
// mapping, the signal read back from its name).
int exit_status_of_summary(const Json& summary) {
  RunTally ended;
  // A status this bitlab does not write (a hand-edited file) is no run that
  // completed: it ends as one that failed.
  ended.status = run_status_from_name(summary.value("status", "")).value_or(RunStatus::kFailed);
  const std::string name = summary.value("signal", "");
  for (const int sig : kStopSignals) {
    if (name == signal_name(sig)) ended.signal = sig;
  }
  return exit_status_of(ended);
}

// Rank 0: summary.json, the report on stderr and the folder on stdout. The
// run's exit status (exit_status_of), or kExitIoError when summary.json
// cannot be written. Other ranks: the exit status only.
int finish_run(const RunContext& run, const RunTally& tally, const Json& twin) {
  Json summary = make_summary(run, tally);
  if (!twin.is_null()) summary["baseline"] = twin_comparison(summary, twin);
  for (const auto& w : end_of_run_warnings(run, tally, summary)) {
    say_warning(run, w);
    summary["warnings"].push_back(w);
  }
  const int exit_status = exit_status_of(tally);
  if (!run.writer) return exit_status;
  if (tally.status == RunStatus::kFailed) {
    // Said whether or not --quiet: the results are incomplete.
    std::fprintf(stderr, "bitlab: error: %s; the run stopped at step %lld, status failed\n",
                 tally.failure.c_str(), static_cast<long long>(tally.last.step));
  }
  try {
    write_json(fs::path(run.dir) / "summary.json", summary);
  } catch (const std::exception& e) {
    // The disk that stopped the rows may refuse the summary too: say so, and
    // never exit 0 (a folder without summary.json is not a finished run).
    std::fprintf(stderr, "bitlab: error: %s: cannot write summary.json (%s)\n", run.dir.c_str(),
                 e.what());
    return kExitIoError;
  }
  report(run, tally, summary.value("baseline", Json()));
  // The folder, alone on stdout, for scripts.
  if (run.options.print_dir) {
    std::printf("%s\n", run.dir.c_str());
    std::fflush(stdout);
  }
  return exit_status;
}

}  // namespace bitlab::run_parts
