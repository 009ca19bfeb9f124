// `bitlab run`: one experiment from start to finish. run_experiment() drives
// the step loop (Simulation, sim/engine/simulation.hpp) and adds what a run
// on the command line needs: the results folder results/<experiment>/<run>/
// (config.json, manifest.json, metrics.csv, comm_log.csv, summary.json),
// progress on stderr, Ctrl-C, and divergence detection.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "sim/comm/transport.hpp"
#include "sim/engine/config.hpp"

namespace bitlab {

class Problem;
class Simulation;

const char* bitlab_version();
const char* bitlab_git_revision();

// How a run is run (not what it runs: that is the Experiment). Filled once per
// caller: the CLI's flags (sim/cli/main.cpp), bitlab.run and
// bitlab.torch.Simulation (python/bitlab/_run_options.py, bound as
// _bitlab.RunOptions).
struct RunOptions {
  std::string out_dir;  // "" : results/<name>/<optimizer>-seed<seed>[-k]
  std::string results_root = "results";
  bool quiet = false;
  int threads = 0;           // 0: OpenMP's default
  std::string command_line;  // recorded in manifest.json
  // The MPI backend's transport (nullptr: the simulator). Rank 0 alone writes
  // the results folder; every rank runs the same step loop.
  Transport* transport = nullptr;
  // Every k steps (and when a signal stops the run) the full state goes to
  // <dir>/checkpoint.bin; 0: never (docs/results.md "Checkpoints").
  int64_t checkpoint_every = 0;
  // Continue the run in out_dir from its checkpoint instead of starting one.
  bool resume = false;
  bool print_dir = true;  // the folder on stdout at the end (not for a twin baseline)
};

// Set by SIGINT, SIGTERM or SIGHUP to the signal's number; the loop stops
// after the current step.
extern std::atomic<int> g_interrupted;

// How a run ended (summary.json's "status"): every step taken; stopped by
// the divergence check (exit 3); stopped by a signal or closed early
// (128 + signal); stopped because its results could not be written (exit 4).
enum class RunStatus { kCompleted, kDiverged, kInterrupted, kFailed };
// "completed", "diverged", "interrupted", "failed": the words summary.json holds.
const char* run_status_name(RunStatus status);
// The status a name stands for; nullopt for any other text.
std::optional<RunStatus> run_status_from_name(const std::string& name);

// A run that could not write its results (a full disk, a lost mount): not bad
// input (2), not a bug (1).
inline constexpr int kExitIoError = 4;

// Exit status: 0 completed, 3 diverged, 4 failed to write its results (see
// summary.json's "failure"), 128 + signal interrupted (130 Ctrl-C, 143
// SIGTERM, 129 SIGHUP). Throws ConfigError for
// bad input before creating any results folder.
int run_experiment(const Experiment& experiment, const RunOptions& options);

// `bitlab run --resume DIR`: refuses (ConfigError, nothing touched) a folder
// that holds no run, a completed or diverged run, or no checkpoint; else
// returns the experiment of DIR/config.json and the checkpoint interval the
// run was started with (its manifest.json).
struct ResumePoint {
  Experiment experiment;
  int64_t checkpoint_every = 0;
};
ResumePoint resume_point(const std::string& dir);
// The run in options.out_dir to continue, as `bitlab run --resume` finds it
// (resume_point checks the folder): its experiment; sets options.resume, and
// options.checkpoint_every, when 0, to the interval the run was started with.
// The CLI, bitlab.run and bitlab.torch.Simulation all resume through it.
Experiment experiment_to_resume(RunOptions& options);

// One run driven from outside, a step per call (the Python bridge,
// bitlab.torch, docs/python.md): what run_experiment does, with the same
// results folder, files, checkpoints, divergence and summary, but the caller
// decides when each step happens (after handing in the workers' gradients).
// Under MPI (options.transport) every rank drives the same steps for its own
// workers and rank 0 writes the folder, as run_experiment. No twin baseline;
// no signal handlers (the caller's own Ctrl-C ends its loop; finish() then
// records the run as interrupted).
class RunSession {
 public:
  // Builds the simulation (with `problem` in place of the registry's when
  // given), then the results folder, config.json, manifest.json and the csv
  // headers; with options.resume, restores the checkpoint of options.out_dir
  // instead (resume_point checks the folder). Throws ConfigError on bad input
  // before the folder exists.
  RunSession(const Experiment& experiment, const RunOptions& options,
             std::unique_ptr<Problem> problem = nullptr);
  ~RunSession();
  RunSession(const RunSession&) = delete;
  RunSession& operator=(const RunSession&) = delete;

  // One step and its rows. False once the run has ended: its last step, a
  // divergence or a failed write (then only finish() is left). Throws
  // ConfigError when the run has already ended.
  bool step();
  // Summary.json and the report; the exit status (run_experiment's). Before
  // the last step the run ends "interrupted" (a checkpoint first when
  // checkpoint_every > 0, so that it can be resumed).
  int finish();
  // Ends the run as "failed" with `why` (a step that threw: bad gradients, an
  // evaluation that raised): summary.json says so; the rows stop at the last
  // whole step. Returns the exit status (4).
  int fail(const std::string& why);
  // Said on stderr (unless quiet) and kept in summary.json's warnings.
  void warn(const std::string& text);

  Simulation& simulation();
  const std::string& dir() const;
  RunStatus status() const;  // kCompleted while it steps
  // Why the run failed (a refused write names its file); empty otherwise.
  const std::string& failure() const;
  bool ended() const;
  bool finished() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Chooses (and creates) the results folder. Throws ConfigError when --out names
// a folder that already holds a run.
std::string make_run_dir(const Experiment& experiment, const RunOptions& options);

}  // namespace bitlab
