// The parts of a run that its files share (private to sim/engine/): what
// every step reads (RunContext), the csv files it writes (RunFiles), what the
// step loop leaves for the summary (RunTally), and each file's entry points.
// run_experiment and RunSession (run.hpp, run.cpp) are these steps in order:
//   run_folder.cpp      the results folder, config.json, manifest.json, the csv headers
//   run_checkpoint.cpp  checkpoint.bin: saved while stepping, restored by --resume
//   run_steps.cpp       the step loop: rows, tally, divergence, warnings, signals
//   run_summary.cpp     summary.json, the report on stderr, the exit status
//   run_twin.cpp        the twin baseline, run first into twin/
#pragma once

#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "sim/core/files.hpp"
#include "sim/engine/run.hpp"
#include "sim/engine/simulation.hpp"

namespace bitlab::run_parts {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Shortest text that reads back to the same double; "nan" for NaN.
inline std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

inline std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

inline void write_json(const fs::path& p, const Json& j) {
  write_text_atomic(p.string(), j.dump(2) + "\n");
}

inline Json finite_or_null(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

class Progress {
 public:
  Progress(int64_t total, bool quiet) : total_(total), quiet_(quiet), tty_(isatty(2)) {
    start_ = last_ = Clock::now();
  }
  void update(int64_t step, double loss) {
    if (quiet_) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // Quiet for short runs; then ~10 redraws a second on a terminal, one line
    // every 5 s in a log file.
    if (elapsed < 1.0 && step < total_) return;
    const double since = std::chrono::duration<double>(now - last_).count();
    if (step < total_ && since < (tty_ ? 0.1 : 5.0)) return;
    if (elapsed < 1.0) return;  // finished within a second: no bar at all
    last_ = now;
    shown_ = true;
    const double rate = step / elapsed;
    const double eta = rate > 0 ? (total_ - step) / rate : 0.0;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s[%s] %lld/%lld steps  %.1f steps/s  loss %.6g  ETA %.0fs%s",
                 tty_ ? "\r" : "", bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), rate, loss, eta, tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
  }
  void finish() {
    if (shown_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_;
  bool quiet_, tty_;
  bool shown_ = false;
  Clock::time_point start_, last_;
};

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Ctrl-C, and what a scheduler sends: Slurm's SIGTERM at a time limit or on
// preemption, SIGHUP when the terminal goes. Each only asks the loop to stop
// after the step in flight, so the run still ends with complete files and its
// summary.
extern "C" void on_stop_signal(int sig);

inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

inline const char* signal_name(int sig) {
  return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "?";
}

// The stop signals are caught from the first step until summary.json is
// written: a signal after the last step must not kill the process before the
// summary exists. The previous handlers come back on destruction.
class StopSignals {
 public:
  StopSignals() {
    g_interrupted.store(0);
    for (size_t k = 0; k < std::size(kStopSignals); ++k)
      old_[k] = std::signal(kStopSignals[k], on_stop_signal);
  }
  ~StopSignals() {
    for (size_t k = 0; k < std::size(kStopSignals); ++k) std::signal(kStopSignals[k], old_[k]);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  void (*old_[std::size(kStopSignals)])(int);
};

// What every step of a run reads: the experiment, the options, the
// simulation, and what follows from them.
struct RunContext {
  RunContext(const Experiment& experiment, const RunOptions& options, Simulation& simulation)
      : experiment(experiment),
        options(options),
        sim(simulation),
        transport(simulation.comm().transport()),
        writer(transport.rank() == 0),
        measured(options.transport != nullptr),
        timed(simulation.topology() != nullptr),
        eval_cols(simulation.eval_columns()) {}

  const Experiment& experiment;
  const RunOptions& options;
  Simulation& sim;
  Transport& transport;
  // Under MPI only rank 0 writes; every rank runs the same loop and sees the
  // same metrics (so all stop at the same step).
  const bool writer;
  const bool measured;  // the MPI backend: transport.csv, the summary's "measured"
  const bool timed;     // a network model: the simulated time columns
  const std::vector<std::string> eval_cols;
  std::string dir;  // the results folder
};

// The csv files a run writes while it steps. On ranks other than 0 the
// streams stay closed: writes to them do nothing.
struct RunFiles {
  std::ofstream metrics, comm_log, transport_csv;
  size_t comm_records_written = 0;
  std::string dir;  // where they are (for the failure message)
  // Bytes of each file up to its last whole step: a write that fails midway
  // (a full disk) is cut back to there, so no file ends in a torn row.
  std::streamoff good_bytes[3] = {0, 0, 0};
  std::string header_failure;  // a header that could not be written

  // The files in a fixed order, with their names (good_bytes follows it).
  std::array<std::pair<std::ofstream*, const char*>, 3> streams() {
    return {{{&metrics, "metrics.csv"},
             {&comm_log, "comm_log.csv"},
             {&transport_csv, "transport.csv"}}};
  }

  // Hands what each open file holds to the system; `sizes[k]` gets the size of
  // file k when it took it (else stays). Returns the first failure, as "cannot
  // write PATH: reason", or "".
  std::string flush(std::streamoff sizes[3]) {
    std::string failure;
    const auto all = streams();
    for (size_t k = 0; k < all.size(); ++k) {
      std::ofstream& stream = *all[k].first;
      if (!stream.is_open()) continue;
      errno = 0;
      if (stream.flush()) {
        sizes[k] = stream.tellp();
      } else if (failure.empty()) {
        failure = "cannot write " + (fs::path(dir) / all[k].second).string() + ": " +
                  (errno != 0 ? std::strerror(errno) : "write error");
      }
    }
    return failure;
  }

  // After a failure: closes the files and cuts each back to good_bytes.
  void cut_back() {
    const auto all = streams();
    for (size_t k = 0; k < all.size(); ++k) {
      if (!all[k].first->is_open()) continue;
      all[k].first->close();
      std::error_code ignored;  // shrinking needs no space
      fs::resize_file(fs::path(dir) / all[k].second, static_cast<uintmax_t>(good_bytes[k]),
                      ignored);
    }
  }
};

struct PhaseTotals {
  int64_t steps = 0;
  double bytes = 0, compute_s = 0, comm_s = 0;
};

struct MeasuredTotals {
  double wall_s = 0, bytes_rank0 = 0, bytes_all = 0, calls_rank0 = 0, comm_s_rank0 = 0;
  double wait_s_rank0 = 0;  // in the barriers of --barrier-before-exchanges
};

// What the step loop leaves for the summary.
struct RunTally {
  RunStatus status = RunStatus::kCompleted;
  int signal = 0;                    // the signal that interrupted it
  std::string failure;               // why it failed: the path and the system's reason
  Json divergence;                   // where and why, when diverged
  StepMetrics last;
  std::vector<double> last_eval;
  int64_t last_eval_step = 0;
  std::map<std::string, PhaseTotals> phases;
  MeasuredTotals measured;
  Clock::time_point t0;
  double wall_before_s = 0.0;  // wall time of the steps before a resume
  // The yardsticks of divergence: step 1's loss, the first measured norm.
  double first_loss = std::numeric_limits<double>::quiet_NaN();
  double first_grad_norm = std::numeric_limits<double>::quiet_NaN();
  // Said once each, kept in summary.json: the configuration's notes, the
  // optimizer's warnings before the run and those it raises while running.
  std::vector<std::string> warnings;
  size_t optimizer_run_warnings = 0;  // how many of run_warnings() were taken
  double wall_s = 0.0;
  int64_t resumed_from_step = 0;  // 0: not resumed
};

// ---------------------------------------------------------------------------
// Each file's entry points, in the order a run meets them.

// run_folder.cpp: the folder (every rank agrees on it; rank 0 makes it), then
// config.json and manifest.json, then the csvs with their header lines.
std::string agree_on_run_dir(const RunContext& run);
// Under MPI: rank 0's `text` on every rank (what the others pass is ignored).
std::string text_from_rank0(Transport& transport, std::string text);
void write_config_and_manifest(const RunContext& run);
void open_run_files(const RunContext& run, RunFiles& files);

// run_checkpoint.cpp (docs/results.md "Checkpoints").
inline constexpr const char* kCheckpointFile = "checkpoint.bin";
// Writes checkpoint.bin atomically; returns "" or why it could not.
std::string save_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally);
// Restores checkpoint.bin and cuts the csvs back to it; ConfigError before
// changing any file when the checkpoint does not check.
void resume_from_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally);

// run_steps.cpp.
void say_warning(const RunContext& run, const std::string& text);
void start_warnings(const RunContext& run, RunTally& tally);
void checkpoint_if_due(const RunContext& run, RunFiles& files, RunTally& tally, int64_t step);
// One step and its rows; false when the run ends at this step.
bool step_once(const RunContext& run, RunFiles& files, RunTally& tally, Progress& progress);
void end_steps(RunFiles& files, RunTally& tally, Progress& progress);
RunTally run_steps(const RunContext& run, RunFiles& files, RunTally tally);

// run_summary.cpp.
int finish_run(const RunContext& run, const RunTally& tally, const Json& twin);
int exit_status_of_summary(const Json& summary);

// run_twin.cpp.
Json run_twin(const RunContext& run);
Json twin_comparison(const Json& summary, const Json& twin);

}  // namespace bitlab::run_parts
