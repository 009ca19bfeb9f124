// run_experiment and RunSession (sim/engine/run.hpp): a Simulation, its
// results folder, the step loop with progress, Ctrl-C and divergence
// detection, and the summary. Each reads top to bottom; each step is a
// function of one of the files run_parts.hpp lists.
#include "sim/engine/run.hpp"

#include <omp.h>

#include <cstdio>
#include <optional>

#include "sim/engine/run_parts.hpp"

namespace bitlab {

using namespace run_parts;

int run_experiment(const Experiment& e, const RunOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  // Everything that can fail on bad input (problem data, shards) is built
  // before the results folder exists.
  Simulation sim(e, o.transport);
  RunContext run(e, o, sim);
  run.dir = agree_on_run_dir(run);
  // The folder is this process's while it runs (rank 0 alone writes it).
  std::optional<FolderLock> lock;
  if (run.writer) lock.emplace(run.dir, ".bitlab.lock", "bitlab run of " + e.run.name);
  if (!o.resume) write_config_and_manifest(run);
  const Json twin = e.run.baseline == "twin" ? run_twin(run) : Json();
  if (!twin.is_null() && twin.value("status", "") != "completed") {
    // Ctrl-C during the twin stops here; a twin that diverged or failed
    // leaves nothing to compare with.
    if (run.writer) {
      std::fprintf(stderr,
                   "bitlab: the twin baseline ended %s (%s/twin/summary.json); the run "
                   "was not started\n",
                   twin.value("status", "?").c_str(), run.dir.c_str());
    }
    return exit_status_of_summary(twin);
  }
  RunFiles files;
  RunTally start;
  start.last_eval.assign(run.eval_cols.size(), std::numeric_limits<double>::quiet_NaN());
  if (o.resume) {
    resume_from_checkpoint(run, files, start);  // the warnings so far included
  } else {
    open_run_files(run, files);
    start_warnings(run, start);
  }
  const StopSignals stop_signals;
  const RunTally tally = run_steps(run, files, std::move(start));
  const int exit_status = finish_run(run, tally, twin);
  // Under MPI no rank leaves before rank 0 has written summary.json: mpirun
  // ends the whole job (SIGKILL) as soon as one rank exits non-zero, as an
  // interrupted rank does (130), which would take rank 0 mid-write.
  if (run.measured) run.transport.max(0.0);
  if (tally.status == RunStatus::kInterrupted) run.transport.exit_after_interrupt(exit_status);
  return exit_status;
}

// ---------------------------------------------------------------------------
// RunSession (run.hpp): the same steps, driven from outside.

struct RunSession::Impl {
  Impl(const Experiment& e, const RunOptions& o, std::unique_ptr<Problem> problem)
      : experiment(e),
        options(o),
        sim(experiment, o.transport, std::move(problem)),
        run(experiment, options, sim),
        progress(e.run.steps, o.quiet) {}
  Experiment experiment;
  RunOptions options;
  Simulation sim;
  RunContext run;
  std::optional<FolderLock> lock;
  RunFiles files;
  RunTally tally;
  Progress progress;
  bool ended = false, finished = false;
};

RunSession::RunSession(const Experiment& e, const RunOptions& o,
                       std::unique_ptr<Problem> problem) {
  if (e.run.baseline != "none") {
    throw ConfigError("baseline = \"" + e.run.baseline +
                          "\": a twin baseline is not available in a driven run (bitlab.torch); "
                          "run the twin as a second Simulation",
                      "baseline");
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  g_interrupted.store(0);  // a signal an earlier CLI run in this process saw is not ours
  impl_ = std::make_unique<Impl>(e, o, std::move(problem));
  Impl& s = *impl_;
  // Under MPI (options.transport) rank 0 makes and writes the folder; every
  // rank knows it.
  s.run.dir = agree_on_run_dir(s.run);
  if (s.run.writer) {
    s.lock.emplace(s.run.dir, ".bitlab.lock", "bitlab run of " + e.run.name + " (Python)");
  }
  s.tally.last_eval.assign(s.run.eval_cols.size(), std::numeric_limits<double>::quiet_NaN());
  if (o.resume) {
    resume_from_checkpoint(s.run, s.files, s.tally);
  } else {
    write_config_and_manifest(s.run);
    open_run_files(s.run, s.files);
    start_warnings(s.run, s.tally);
  }
  s.tally.t0 = Clock::now();
  s.ended = s.sim.steps_done() >= e.run.steps;
}

RunSession::~RunSession() = default;

bool RunSession::step() {
  Impl& s = *impl_;
  if (s.ended) {
    throw ConfigError(std::string("the run has ended (") + run_status_name(s.tally.status) + ", " +
                      std::to_string(s.sim.steps_done()) + "/" +
                      std::to_string(s.experiment.run.steps) + " steps): no more steps");
  }
  const bool go_on = step_once(s.run, s.files, s.tally, s.progress);
  s.ended = !go_on || s.sim.steps_done() >= s.experiment.run.steps;
  return !s.ended;
}

int RunSession::finish() {
  Impl& s = *impl_;
  if (s.finished) throw ConfigError("the run is already finished: " + s.run.dir);
  if (!s.ended && s.tally.status == RunStatus::kCompleted) {
    s.tally.status = RunStatus::kInterrupted;
    s.tally.signal = 0;
    checkpoint_if_due(s.run, s.files, s.tally, s.sim.steps_done());
  }
  end_steps(s.files, s.tally, s.progress);
  const int status = finish_run(s.run, s.tally, Json());
  // Under MPI no rank leaves before rank 0 has written summary.json.
  if (s.run.measured) s.run.transport.max(0.0);
  s.lock.reset();
  s.ended = s.finished = true;
  return status;
}

int RunSession::fail(const std::string& why) {
  Impl& s = *impl_;
  if (s.finished) throw ConfigError("the run is already finished: " + s.run.dir);
  if (s.run.measured && s.run.transport.ranks() > 1) {
    // One rank's failure (a refused gradient of its own workers) is not
    // seen by the others, which would wait in the next exchange forever:
    // end every rank now, saying why (rank 0 cannot write this rank's reason).
    std::fprintf(stderr, "bitlab: rank %d failed: %s; ending every rank\n",
                 s.run.transport.rank(), why.c_str());
    s.run.transport.abort(4);
  }
  s.tally.status = RunStatus::kFailed;
  s.tally.failure = why;
  s.ended = true;
  return finish();
}

void RunSession::warn(const std::string& text) {
  say_warning(impl_->run, text);
  impl_->tally.warnings.push_back(text);
}

Simulation& RunSession::simulation() { return impl_->sim; }
const std::string& RunSession::dir() const { return impl_->run.dir; }
RunStatus RunSession::status() const { return impl_->tally.status; }
const std::string& RunSession::failure() const { return impl_->tally.failure; }
bool RunSession::ended() const { return impl_->ended; }
bool RunSession::finished() const { return impl_->finished; }

}  // namespace bitlab

