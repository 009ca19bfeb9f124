// The step loop of a run (run_parts.hpp): each step's rows, its tally,
// divergence, warnings, a stop signal, a checkpoint.
#include "sim/engine/run_parts.hpp"

#include "sim/core/threads.hpp"

namespace bitlab::run_parts {

namespace {

// The MPI backend's measurements of one step: a row of transport.csv. Every
// rank takes part (the max and sum gather over ranks).
void measure_step(const RunContext& run, const StepMetrics& m, Clock::time_point step_start,
                  const TransportStats& before, std::ostream& csv, MeasuredTotals& totals) {
  Transport& transport = run.transport;
  const double wall = transport.max(seconds_since(step_start));
  const TransportStats step = stats_since(transport.stats(), before);
  const double bytes = static_cast<double>(step.bytes_sent);
  const double calls = static_cast<double>(step.calls);
  const double bytes_all = transport.sum(bytes);
  totals.wall_s += wall;
  totals.bytes_rank0 += bytes;
  totals.bytes_all += bytes_all;
  totals.calls_rank0 += calls;
  const double comm_max = transport.max(m.transport_s);
  totals.comm_s_rank0 += m.transport_s;
  totals.wait_s_rank0 += m.transport_wait_s;
  csv << m.step << ',' << fmt(wall) << ',' << fmt(bytes) << ',' << fmt(bytes_all) << ','
      << fmt(calls) << ',' << fmt(m.bytes_sent) << ',' << fmt(m.comm_s) << ',' << fmt(m.step_s)
      << ',' << fmt(m.transport_s) << ',' << fmt(comm_max) << ',' << fmt(m.transport_wait_s)
      << '\n';
}

StepMetrics take_step(const RunContext& run, RunFiles& files, RunTally& tally) {
  const auto step_start = Clock::now();
  const TransportStats before = run.transport.stats();
  StepMetrics m = run.sim.step();
  m.wall_s = tally.wall_before_s + seconds_since(tally.t0);
  if (run.measured) {
    measure_step(run, m, step_start, before, files.transport_csv, tally.measured);
  }
  return m;
}

void write_metrics_row(std::ostream& out, const StepMetrics& m, size_t eval_count, bool timed) {
  out << m.step << ',' << m.phase << ',' << fmt(m.train_loss) << ','
      << (std::isnan(m.grad_norm) ? std::string() : fmt(m.grad_norm));
  for (size_t k = 0; k < eval_count; ++k) {
    out << ',' << (m.eval.empty() ? std::string() : fmt(m.eval[k]));
  }
  out << ',' << fmt(m.bytes_sent) << ',' << fmt(m.bytes_sent_cum) << ',' << m.messages << ','
      << m.messages_cum;
  if (timed) {
    out << ',' << fmt(m.compute_s) << ',' << fmt(m.comm_s) << ',' << fmt(m.step_s) << ','
        << fmt(m.sim_time_s);
  }
  out << ',' << fmt(m.wall_s) << '\n';
}

// The collectives logged since the last call, one row each.
void write_new_comm_records(RunFiles& files, const CommLog& log) {
  const auto& recs = log.records();
  for (; files.comm_records_written < recs.size(); ++files.comm_records_written) {
    const auto& r = recs[files.comm_records_written];
    files.comm_log << r.step << ',' << r.op << ',' << r.algorithm << ',' << r.dtype << ','
                   << r.scope << ',' << r.ranks << ',' << r.groups << ',' << r.payload_bytes << ','
                   << fmt(r.sent_bytes) << ',' << r.messages << '\n';
  }
}

void tally_step(RunTally& tally, const StepMetrics& m, bool timed) {
  auto& ph = tally.phases[m.phase];
  ph.steps += 1;
  ph.bytes += m.bytes_sent;
  if (timed) {
    ph.compute_s += m.compute_s;
    ph.comm_s += m.comm_s;
  }
  if (!m.eval.empty()) {
    tally.last_eval = m.eval;
    tally.last_eval_step = m.step;
  }
  tally.last = m;
}

// Why step m counts as diverged ("" when it does not): a loss or measured
// gradient norm that is not finite, or that exceeds its stated multiple of the
// run's first (RunSettings: diverge_loss_factor, diverge_grad_norm_factor).
// `loss_measured` false: the step's train_loss is NaN by design (a bridge
// run not told its losses) and only the gradient norm is judged.
std::string divergence_reason(const RunSettings& rs, RunTally& tally, const StepMetrics& m,
                              bool loss_measured) {
  if (loss_measured && !std::isfinite(m.train_loss)) return "train_loss is " + fmt(m.train_loss);
  const bool measured = !std::isnan(m.grad_norm);
  if (measured && !std::isfinite(m.grad_norm)) return "grad_norm is " + fmt(m.grad_norm);
  if (loss_measured && std::isnan(tally.first_loss)) tally.first_loss = m.train_loss;
  if (measured && std::isnan(tally.first_grad_norm)) tally.first_grad_norm = m.grad_norm;
  const double loss_limit = rs.diverge_loss_factor * tally.first_loss;
  if (loss_measured && rs.diverge_loss_factor > 0 && tally.first_loss > 0 &&
      m.train_loss > loss_limit) {
    return "train_loss " + fmt(m.train_loss) + " exceeds diverge_loss_factor " +
           fmt(rs.diverge_loss_factor) + " x the first step's " + fmt(tally.first_loss);
  }
  const double grad_limit = rs.diverge_grad_norm_factor * tally.first_grad_norm;
  if (measured && rs.diverge_grad_norm_factor > 0 && tally.first_grad_norm > 0 &&
      m.grad_norm > grad_limit) {
    return "grad_norm " + fmt(m.grad_norm) + " exceeds diverge_grad_norm_factor " +
           fmt(rs.diverge_grad_norm_factor) + " x the first measured " + fmt(tally.first_grad_norm);
  }
  return "";
}

// summary.json's "divergence": the step, what went wrong, and a hint that
// starts with the likely cause the optimizer's state shows (`cause`, "" when
// none: Optimizer::divergence_cause).
Json divergence_record(const Experiment& e, const StepMetrics& m, const std::string& what,
                       const std::string& cause) {
  const double lr = e.optimizer.contains("lr") ? e.optimizer.at("lr").get<double>() : 0.0;
  const std::string generic =
      "try a smaller optimizer.lr (now " + fmt(lr) +
      "), a longer warm-up, or check the problem's scale (the thresholds are "
      "diverge_loss_factor and diverge_grad_norm_factor)";
  return {{"step", m.step},
          {"what", what},
          {"hint", cause.empty() ? "the optimizer diverged; " + generic
                                 : "likely cause: " + cause + "; otherwise " + generic}};
}

// The stop signal seen, 0 if none. Under MPI a signal may reach the ranks at
// different steps (or only mpirun's rank 0): stop when any rank saw one, all at
// the same step boundary, agreeing on the largest signal number (a
// bookkeeping max, not a metric).
int interrupted(const RunContext& run) {
  const int sig = g_interrupted.load();
  return run.measured ? static_cast<int>(run.transport.max(static_cast<double>(sig))) : sig;
}

// Every row of the step is handed to the system now (one flush per file and
// step: a killed run loses at most the step in flight, and a full disk is
// seen at the step it happens). A failed write ends the run as `failed`, with
// the path and the system's reason; under MPI every rank stops at the same
// step (rank 0 alone writes).
bool write_failed(const RunContext& run, RunFiles& files, RunTally& tally) {
  std::string failure = files.header_failure;
  if (run.writer) {
    std::streamoff now_bytes[3] = {0, 0, 0};
    const std::string step_failure = files.flush(now_bytes);
    if (failure.empty()) failure = step_failure;
    // All files end at the same whole step: the step is kept only when every
    // file took it.
    if (failure.empty()) std::copy(now_bytes, now_bytes + 3, files.good_bytes);
    if (!failure.empty()) files.cut_back();
  }
  const bool any =
      run.measured ? run.transport.max(failure.empty() ? 0.0 : 1.0) > 0.0 : !failure.empty();
  if (!any) return false;
  tally.status = RunStatus::kFailed;
  tally.failure = failure.empty() ? "another rank could not write its results" : failure;
  return true;
}



// The warnings the optimizer raised during the last step, said once.
void report_new_warnings(const RunContext& run, RunTally& tally) {
  const auto& raised = run.sim.optimizer().run_warnings();
  for (; tally.optimizer_run_warnings < raised.size(); ++tally.optimizer_run_warnings) {
    say_warning(run, raised[tally.optimizer_run_warnings]);
    tally.warnings.push_back(raised[tally.optimizer_run_warnings]);
  }
}

// Steps until the last step, a divergence or Ctrl-C (which stops the loop
// after the current step, so the run still ends with its summary).
// A checkpoint is due every checkpoint_every steps before the last, and when a
// signal stops the run (so a preempted run loses nothing).
bool checkpoint_due(const RunContext& run, const RunTally& tally, int64_t step) {
  const int64_t every = run.options.checkpoint_every;
  if (every <= 0 || step >= run.experiment.run.steps) return false;
  if (tally.status == RunStatus::kInterrupted) return true;
  return tally.status == RunStatus::kCompleted && step % every == 0;
}

}  // namespace

// Ctrl-C, and what a scheduler sends: Slurm's SIGTERM at a time limit or on
// preemption, SIGHUP when the terminal goes. Each only asks the loop to stop
// after the step in flight, so the run still ends with complete files and its
// summary.
extern "C" void on_stop_signal(int sig) {
  g_interrupted.store(sig);
}

void say_warning(const RunContext& run, const std::string& text) {
  if (run.writer && !run.options.quiet) {
    std::fprintf(stderr, "bitlab: warning: %s\n", text.c_str());
  }
}

// A batch larger than a worker's shard: each batch repeats the shard's
// samples (the sampler goes round it), which is rarely what was meant.
std::string batch_size_warning(const RunContext& run) {
  const ClusterOptions& c = run.experiment.cluster;
  const size_t samples = run.sim.problem().num_train();
  if (c.batch_size.full || samples == 0 || c.workers < 1) return "";
  const bool replicated = c.sharding == "replicated";
  const size_t shard = replicated ? samples : samples / static_cast<size_t>(c.workers);
  if (static_cast<uint64_t>(c.batch_size.samples) <= shard) return "";
  return "cluster.batch_size = " + std::to_string(c.batch_size.samples) +
         " is larger than a worker's shard (about " + std::to_string(shard) + " samples: " +
         (replicated ? std::string("the whole training set")
                     : std::to_string(samples) + " training samples over " +
                           std::to_string(c.workers) + " workers") +
         "): each batch repeats the shard's samples; use a batch_size of at most " +
         std::to_string(shard) + " or \"full\"";
}

// Before the first step: the configuration's notes (options an optimizer
// switch dropped) and the optimizer's warnings about this run's settings.
void start_warnings(const RunContext& run, RunTally& tally) {
  tally.warnings = run.experiment.notes;
  for (auto& w : run.sim.optimizer().warnings(run.experiment.run.steps)) {
    tally.warnings.push_back(std::move(w));
  }
  const std::string batch = batch_size_warning(run);
  if (!batch.empty()) tally.warnings.push_back(batch);
  for (const auto& w : tally.warnings) say_warning(run, w);
  // Not a setting of the experiment (the bits do not depend on it): said, not
  // kept in the summary.
  const std::string threads = thread_count_warning(run.options.threads, machine_cores());
  if (!threads.empty()) say_warning(run, threads);
}

void checkpoint_if_due(const RunContext& run, RunFiles& files, RunTally& tally, int64_t step) {
  if (!checkpoint_due(run, tally, step)) return;
  const std::string failure = save_checkpoint(run, files, tally);
  if (failure.empty()) return;
  tally.status = RunStatus::kFailed;
  tally.failure = failure;
}

// One step and what follows it: its rows, its tally, divergence, warnings, a
// stop signal, a checkpoint. False when the run ends at this step (diverged,
// interrupted, failed; the last step is the caller's to see).
bool step_once(const RunContext& run, RunFiles& files, RunTally& tally, Progress& progress) {
  const StepMetrics m = take_step(run, files, tally);
  write_metrics_row(files.metrics, m, run.eval_cols.size(), run.timed);
  write_new_comm_records(files, run.sim.comm().log());
  tally_step(tally, m, run.timed);
  progress.update(m.step, m.train_loss);
  if (write_failed(run, files, tally)) return false;
  const std::string why =
      divergence_reason(run.experiment.run, tally, m, run.sim.losses_measured());
  if (!why.empty()) {
    tally.status = RunStatus::kDiverged;
    tally.divergence =
        divergence_record(run.experiment, m, why, run.sim.optimizer().divergence_cause());
    return false;
  }
  report_new_warnings(run, tally);
  if (const int sig = interrupted(run)) {
    tally.status = RunStatus::kInterrupted;
    tally.signal = sig;
  }
  checkpoint_if_due(run, files, tally, m.step);
  return tally.status == RunStatus::kCompleted;
}

// After the last step taken: the csvs closed, the wall time taken.
void end_steps(RunFiles& files, RunTally& tally, Progress& progress) {
  progress.finish();
  files.metrics.close();
  files.comm_log.close();
  files.transport_csv.close();
  tally.wall_s = tally.wall_before_s + seconds_since(tally.t0);
}

RunTally run_steps(const RunContext& run, RunFiles& files, RunTally tally) {
  Progress progress(run.experiment.run.steps, run.options.quiet || !run.writer);
  tally.t0 = Clock::now();
  for (int64_t t = run.sim.steps_done() + 1; t <= run.experiment.run.steps; ++t) {
    if (!step_once(run, files, tally, progress)) break;
  }
  end_steps(files, tally, progress);
  return tally;
}

}  // namespace bitlab::run_parts

namespace bitlab {

// The signal that asked the run to stop (SIGINT, SIGTERM or SIGHUP), 0 if none.
std::atomic<int> g_interrupted{0};

}  // namespace bitlab
