// run_experiment (sim/engine/run.hpp): a Simulation, its results folder, the
// step loop with progress, Ctrl-C and divergence detection, and the summary.
// run_experiment reads top to bottom; each step is a function below.
#include "sim/engine/run.hpp"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
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
#include <optional>
#include <vector>

#include "sim/core/files.hpp"
#include "sim/core/human.hpp"
#include "sim/core/memory.hpp"
#include "sim/core/state_archive.hpp"
#include "sim/core/threads.hpp"
#include "sim/engine/simulation.hpp"

namespace bitlab {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The signal that asked the run to stop (SIGINT, SIGTERM or SIGHUP), 0 if none.
std::atomic<int> g_interrupted{0};

namespace {

// Shortest text that reads back to the same double; "nan" for NaN.
std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_json(const fs::path& p, const Json& j) {
  write_text_atomic(p.string(), j.dump(2) + "\n");
}

Json finite_or_null(double v) {
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

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Ctrl-C, and what a scheduler sends: Slurm's SIGTERM at a time limit or on
// preemption, SIGHUP when the terminal goes. Each only asks the loop to stop
// after the step in flight, so the run still ends with complete files and its
// summary.
extern "C" void on_stop_signal(int sig) {
  g_interrupted.store(sig);
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

const char* signal_name(int sig) {
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
  RunContext(const Experiment& experiment, const RunCliOptions& options, Simulation& simulation)
      : experiment(experiment),
        options(options),
        sim(simulation),
        transport(simulation.comm().transport()),
        writer(transport.rank() == 0),
        measured(options.transport != nullptr),
        timed(simulation.topology() != nullptr),
        eval_cols(simulation.eval_columns()) {}

  const Experiment& experiment;
  const RunCliOptions& options;
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
};

// What the step loop leaves for the summary.
struct RunTally {
  std::string status = "completed";  // or "diverged", "interrupted", "failed"
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
// Before the first step: the folder, config.json and manifest.json, the csvs

std::string agree_on_run_dir(const RunContext& run) {
  if (!run.measured) return make_run_dir(run.experiment, run.options);
  // Rank 0 makes the folder; the others learn whether it could, so a bad
  // --out stops every rank (the message is printed once, by rank 0).
  std::string dir;
  uint8_t ok = 1;
  std::string error;
  if (run.writer) {
    try {
      dir = make_run_dir(run.experiment, run.options);
    } catch (const ConfigError& err) {
      ok = 0;
      error = err.what();
    }
  }
  run.transport.broadcast(&ok, 1, 0);
  if (!ok) throw ConfigError(run.writer ? error : "(reported by rank 0)");
  return dir;
}

Json make_manifest(const RunContext& run, const std::string& started_utc) {
  Json manifest = Json::object();
  manifest["bitlab_version"] = bitlab_version();
  manifest["git_revision"] = bitlab_git_revision();
  manifest["seed"] = run.experiment.run.seed;
  manifest["threads"] = run.options.threads > 0 ? run.options.threads : omp_get_max_threads();
  manifest["omp_wait_policy"] = omp_wait_policy_text();
  manifest["command"] = run.options.command_line;
  manifest["started_utc"] = started_utc;
  manifest["backend"] = run.transport.name();
  manifest["ranks"] = run.transport.ranks();
  manifest["files"] = {{"config.json", "the resolved experiment, every default filled in"},
                       {"metrics.csv", "one row per step; eval columns at eval steps"},
                       {"comm_log.csv", "one row per collective: what the network model prices"},
                       {"summary.json", "written last: how the run ended, totals, final metrics"}};
  if (run.options.checkpoint_every > 0) {
    manifest["checkpoint_every"] = run.options.checkpoint_every;
    manifest["files"]["checkpoint.bin"] =
        "the full state at the last checkpoint, for bitlab run --resume (binary)";
  }
  if (run.measured) {
    manifest["files"]["transport.csv"] =
        "MPI backend: per step, measured wall time and bytes handed to MPI beside the time "
        "model's prediction";
  }
  return manifest;
}

// A refused write (a full disk) removes what the run wrote so far and the
// folder when that leaves it empty: no folder holding only .bitlab.lock looks
// like a run. IoError then ends the command with exit 4.
void write_config_and_manifest(const RunContext& run) {
  if (!run.writer) return;
  const std::string started_utc = utc_now();
  const fs::path d(run.dir);
  try {
    write_json(d / "config.json", run.experiment.resolved);
    write_json(d / "manifest.json", make_manifest(run, started_utc));
  } catch (const IoError&) {
    std::error_code ignored;
    for (const char* name : {"config.json", "manifest.json", ".bitlab.lock"}) {
      fs::remove(d / name, ignored);
    }
    fs::remove(d, ignored);  // only when empty
    throw;
  }
}

// Opens the csvs (rank 0) and writes their header lines.
void open_run_files(const RunContext& run, RunFiles& files) {
  if (run.writer) {
    const fs::path d(run.dir);
    files.dir = run.dir;
    files.metrics.open(d / "metrics.csv");
    files.comm_log.open(d / "comm_log.csv");
    if (run.measured) files.transport_csv.open(d / "transport.csv");
  }
  files.metrics << "step,phase,train_loss,grad_norm";
  for (const auto& c : run.eval_cols) files.metrics << ',' << c;
  files.metrics << ",bytes_sent,bytes_sent_cum,messages,messages_cum";
  if (run.timed) files.metrics << ",compute_s,comm_s,step_s,sim_time_s";
  files.metrics << ",wall_s\n";
  files.comm_log
      << "step,op,algorithm,dtype,scope,ranks,groups,payload_bytes,sent_bytes,messages\n";
  // Measured next to modelled (MPI backend): the step's wall time (max over
  // ranks), the bytes this rank and all ranks handed to MPI, and MPI calls.
  // The logical bytes (per worker, as metrics.csv) and the model's times sit
  // beside them; logged bytes count every worker, MPI bytes only what crosses
  // between ranks (workers of one rank share memory). Last, the seconds spent
  // inside MPI during the optimizer's exchanges (rank 0, and the max over
  // ranks): what model_comm_s predicts (waiting for slower ranks included).
  files.transport_csv << "step,wall_step_s,mpi_bytes_rank0,mpi_bytes_all_ranks,mpi_calls_rank0,"
                         "model_bytes_per_worker,model_comm_s,model_step_s,mpi_comm_s_rank0,"
                         "mpi_comm_s_max\n";
  // Each header that was written is the first whole content its file is cut
  // back to after a failed write.
  files.header_failure = files.flush(files.good_bytes);
}

// ---------------------------------------------------------------------------
// Checkpoints (docs/results.md "Checkpoints"): checkpoint.bin holds the
// simulation's state (sim/engine/simulation.hpp) after the run's own part:
// the format, the bitlab that wrote it, the experiment it belongs to, where
// each csv ended, and the tally; last, a seal (a checksum of every byte
// before it). A checkpoint is refused (ConfigError, nothing changed) unless
// all of it checks: the seal, the version, the experiment, every length
// against the file's size, and what it says against the run's own files.

constexpr const char* kCheckpointFile = "checkpoint.bin";
// 2: sealed with a checksum; the version and a hash of config.json in place
// of config.json's text.
constexpr const char* kCheckpointFormat = "bitlab-checkpoint-2";
constexpr std::string_view kCheckpointFormatStem = "bitlab-checkpoint-";

fs::path checkpoint_path(const RunContext& run) { return fs::path(run.dir) / kCheckpointFile; }

void tally_state(StateArchive& io, RunTally& tally) {
  io.field("tally.last_eval", tally.last_eval);
  io.field("tally.last_eval_step", tally.last_eval_step);
  io.field("tally.wall_s", tally.wall_before_s);
  io.field("tally.first_loss", tally.first_loss);
  io.field("tally.first_grad_norm", tally.first_grad_norm);
  uint64_t warnings = tally.warnings.size();
  io.count("tally.warnings", warnings);  // bounded by the file: safe to size by
  tally.warnings.resize(warnings);
  for (auto& w : tally.warnings) io.field("warning", w);
  uint64_t phases = tally.phases.size();
  io.count("tally.phases", phases);
  auto it = tally.phases.begin();
  for (uint64_t k = 0; k < phases; ++k) {
    std::string name = io.loading() ? std::string() : it->first;
    io.field("phase.name", name);
    PhaseTotals& totals = io.loading() ? tally.phases[name] : (it++)->second;
    io.field("phase.steps", totals.steps);
    io.field("phase.bytes", totals.bytes);
    io.field("phase.compute_s", totals.compute_s);
    io.field("phase.comm_s", totals.comm_s);
  }
}

// Loading, before anything else: the seal, and the format (the first entry
// of every version's checkpoint). A format of another version is said as
// such even though its seal fails (format 1 had none); any other failed seal
// is damage.
void check_format_and_seal(StateArchive& io, const fs::path& path) {
  const bool intact = io.verify_seal();
  std::string format;
  try {
    io.field("format", format);
  } catch (const ConfigError&) {
    if (intact) throw;
  }
  if (format != kCheckpointFormat && format.starts_with(kCheckpointFormatStem)) {
    throw ConfigError(path.string() + ": format \"" + format + "\", this bitlab reads \"" +
                      kCheckpointFormat + "\" (written by another version); cannot resume");
  }
  if (!intact) {
    throw ConfigError(path.string() + ": checksum mismatch (the file is damaged); cannot resume");
  }
  if (format != kCheckpointFormat) {
    throw ConfigError(path.string() + ": not a bitlab checkpoint (format \"" + format +
                      "\"); cannot resume");
  }
}

// The run's part. Loading refuses a damaged checkpoint, one of another format
// or bitlab version, or of another experiment than the folder's config.json.
void run_state(StateArchive& io, const RunContext& run, RunFiles& files, RunTally& tally) {
  const fs::path path = checkpoint_path(run);
  std::string format = kCheckpointFormat;
  if (io.loading()) {
    check_format_and_seal(io, path);  // reads "format"
  } else {
    io.field("format", format);
  }
  std::string version = bitlab_version();
  io.field("bitlab_version", version);
  if (io.loading() && version != bitlab_version()) {
    // The state's layout may differ between versions even where every
    // entry's name and length agree.
    throw ConfigError(path.string() + ": written by bitlab " + version + ", this is " +
                      bitlab_version() + "; resume it with the bitlab that wrote it");
  }
  const uint64_t config_hash = fnv1a64(run.experiment.resolved.dump());
  uint64_t saved_hash = config_hash;
  io.field("config.fnv1a64", saved_hash);
  if (saved_hash != config_hash) {
    throw ConfigError(path.string() + ": written for another experiment than " +
                      (fs::path(run.dir) / "config.json").string() +
                      " holds (was config.json edited?); cannot resume");
  }
  io.field("files.metrics_bytes", files.good_bytes[0]);
  io.field("files.comm_log_bytes", files.good_bytes[1]);
  tally_state(io, tally);
}

// Writes checkpoint.bin atomically; returns "" or why it could not.
std::string save_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally) {
  StateArchive io;
  tally.wall_before_s += seconds_since(tally.t0);  // the wall time so far, saved
  tally.t0 = Clock::now();
  run_state(io, run, files, tally);
  run.sim.serialize(io);
  io.seal();
  try {
    write_text_atomic(checkpoint_path(run).string(), io.bytes());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// checkpoint.bin's bytes; a folder or an unreadable file is refused naming it.
std::string read_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    throw ConfigError(path.string() + ": not a regular file (a folder?); cannot resume");
  }
  const uintmax_t size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) {
    throw ConfigError(path.string() + ": cannot be read (" +
                      (ec ? ec.message() : std::string(std::strerror(errno))) + "); cannot resume");
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(in.gcount()) != size) {
    throw ConfigError(path.string() + ": cannot be read (read error); cannot resume");
  }
  return bytes;
}

// Checks what the checkpoint says of `csv` (its entry `entry`): the file had
// `bytes` bytes then, which must be its header line and `rows` whole rows,
// the last one of step `last_step` (when > 0). A checkpoint that passed its
// seal can still disagree with its folder (an older checkpoint.bin copied
// in); resuming from it would lose or duplicate rows.
void check_csv_at_checkpoint(const fs::path& csv, const std::string& entry, std::streamoff bytes,
                             uint64_t rows, int64_t last_step, const std::string& source) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(csv, ec);
  std::ifstream in(csv, std::ios::binary);
  if (ec || !in) throw ConfigError(csv.string() + ": cannot be read; cannot resume");
  std::string header;
  std::getline(in, header);
  const auto header_bytes = static_cast<std::streamoff>(header.size() + 1);
  const std::string where = source + ": " + entry + " = " + std::to_string(bytes) + ": ";
  if (bytes < 0 || static_cast<uintmax_t>(bytes) > size) {
    throw ConfigError(where + csv.string() + " is shorter than at the checkpoint (" +
                      std::to_string(size) + " bytes); cannot resume");
  }
  if (bytes < header_bytes) {
    throw ConfigError(where + "shorter than the header of " + csv.string() + " (" +
                      std::to_string(header_bytes) + " bytes; the file is damaged); cannot resume");
  }
  uint64_t lines = 0;
  std::string line, last;  // the first characters of each, enough for the step
  std::vector<char> buf(1 << 20);
  for (std::streamoff left = bytes - header_bytes; left > 0;) {
    const auto n = std::min<std::streamoff>(left, static_cast<std::streamoff>(buf.size()));
    if (!in.read(buf.data(), n)) throw ConfigError(csv.string() + ": read error; cannot resume");
    for (std::streamoff k = 0; k < n; ++k) {
      if (buf[k] == '\n') {
        ++lines;
        last.swap(line);
        line.clear();
      } else if (line.size() < 32) {
        line.push_back(buf[k]);
      }
    }
    left -= n;
  }
  const bool last_ok = last_step <= 0 || last.starts_with(std::to_string(last_step) + ",");
  if (!line.empty() || lines != rows || !last_ok) {
    throw ConfigError(where + csv.string() + " holds " + std::to_string(lines) +
                      " rows up to there" + (line.empty() ? "" : ", then part of one") +
                      ", the last \"" + last + "\"; the checkpoint says " +
                      std::to_string(rows) +
                      " rows (the checkpoint does not belong to these files, or is damaged); "
                      "cannot resume");
  }
}

// What a loaded checkpoint says, against the run: the step within the run,
// the phases' steps adding up to it, and each csv's rows up to where it ended.
void check_loaded_checkpoint(const RunContext& run, const RunFiles& files, const RunTally& tally) {
  const std::string source = checkpoint_path(run).string();
  const int64_t step = run.sim.steps_done(), steps = run.experiment.run.steps;
  if (step < 1 || step >= steps) {
    throw ConfigError(source + ": step " + std::to_string(step) + ": must be in [1, " +
                      std::to_string(steps) + ") for this run (the file is damaged); cannot resume");
  }
  int64_t phase_steps = 0;
  for (const auto& [name, totals] : tally.phases) {
    if (totals.steps < 0 || totals.steps > step) phase_steps = -1;
    if (phase_steps >= 0) phase_steps += totals.steps;
  }
  if (phase_steps != step) {
    throw ConfigError(source + ": the phases' step counts do not add up to step " +
                      std::to_string(step) + " (the file is damaged); cannot resume");
  }
  const fs::path dir(run.dir);
  check_csv_at_checkpoint(dir / "metrics.csv", "files.metrics_bytes", files.good_bytes[0],
                          static_cast<uint64_t>(step), step, source);
  check_csv_at_checkpoint(dir / "comm_log.csv", "files.comm_log_bytes", files.good_bytes[1],
                          run.sim.collectives(), 0, source);
}

// Restores the state of checkpoint.bin, then cuts each csv back to where it
// ended at the checkpoint (rows a killed run wrote after it go) and reopens it
// for appending. Throws ConfigError before changing any file.
void resume_from_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally) {
  const fs::path path = checkpoint_path(run);
  StateArchive io(read_checkpoint(path), path.string());
  run_state(io, run, files, tally);
  run.sim.serialize(io);
  io.expect_end();
  check_loaded_checkpoint(run, files, tally);
  // Checkpoints a kill interrupted mid-write: the folder is locked, so none
  // is a live writer's.
  remove_atomic_leftovers(path.string());
  const auto all = files.streams();
  files.dir = run.dir;
  for (size_t k = 0; k < 2; ++k) {
    const fs::path csv = fs::path(run.dir) / all[k].second;
    fs::resize_file(csv, static_cast<uintmax_t>(files.good_bytes[k]));
    all[k].first->open(csv, std::ios::app);
  }
  std::error_code ignored;
  fs::remove(fs::path(run.dir) / "summary.json", ignored);  // the run is not finished now
  tally.resumed_from_step = run.sim.steps_done();
}

// ---------------------------------------------------------------------------
// The step loop

// The MPI backend's measurements of one step: a row of transport.csv. Every
// rank takes part (the max and sum gather over ranks).
void measure_step(const RunContext& run, const StepMetrics& m, Clock::time_point step_start,
                  const TransportStats& before, std::ostream& csv, MeasuredTotals& totals) {
  Transport& transport = run.transport;
  const double wall = transport.max(seconds_since(step_start));
  const double bytes = static_cast<double>(transport.stats().bytes_sent - before.bytes_sent);
  const double calls = static_cast<double>(transport.stats().calls - before.calls);
  const double bytes_all = transport.sum(bytes);
  totals.wall_s += wall;
  totals.bytes_rank0 += bytes;
  totals.bytes_all += bytes_all;
  totals.calls_rank0 += calls;
  const double comm_max = transport.max(m.transport_s);
  totals.comm_s_rank0 += m.transport_s;
  csv << m.step << ',' << fmt(wall) << ',' << fmt(bytes) << ',' << fmt(bytes_all) << ','
      << fmt(calls) << ',' << fmt(m.bytes_sent) << ',' << fmt(m.comm_s) << ',' << fmt(m.step_s)
      << ',' << fmt(m.transport_s) << ',' << fmt(comm_max) << '\n';
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
  tally.status = "failed";
  tally.failure = failure.empty() ? "another rank could not write its results" : failure;
  return true;
}

void say_warning(const RunContext& run, const std::string& text) {
  if (run.writer && !run.options.quiet) {
    std::fprintf(stderr, "bitlab: warning: %s\n", text.c_str());
  }
}

// Before the first step: the configuration's notes (options an optimizer
// switch dropped) and the optimizer's warnings about this run's settings.
void start_warnings(const RunContext& run, RunTally& tally) {
  tally.warnings = run.experiment.notes;
  for (auto& w : run.sim.optimizer().warnings(run.experiment.run.steps)) {
    tally.warnings.push_back(std::move(w));
  }
  for (const auto& w : tally.warnings) say_warning(run, w);
  // Not a setting of the experiment (the bits do not depend on it): said, not
  // kept in the summary.
  const std::string threads = thread_count_warning(run.options.threads, machine_cores());
  if (!threads.empty()) say_warning(run, threads);
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
  if (tally.status == "interrupted") return true;
  return tally.status == "completed" && step % every == 0;
}

void checkpoint_if_due(const RunContext& run, RunFiles& files, RunTally& tally, int64_t step) {
  if (!checkpoint_due(run, tally, step)) return;
  const std::string failure = save_checkpoint(run, files, tally);
  if (failure.empty()) return;
  tally.status = "failed";
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
      divergence_reason(run.experiment.run, tally, m, run.sim.problem().losses_measured());
  if (!why.empty()) {
    tally.status = "diverged";
    tally.divergence =
        divergence_record(run.experiment, m, why, run.sim.optimizer().divergence_cause());
    return false;
  }
  report_new_warnings(run, tally);
  if (const int sig = interrupted(run)) {
    tally.status = "interrupted";
    tally.signal = sig;
  }
  checkpoint_if_due(run, files, tally, m.step);
  return tally.status == "completed";
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

// ---------------------------------------------------------------------------
// After the last step: summary.json and the report on stderr

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
          {"comm_s", comm_s}};
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
  summary["status"] = tally.status;
  summary["experiment"] = e.run.name;
  summary["problem"] = e.problem.at("name");
  summary["optimizer"] = e.optimizer.at("name");
  summary["workers"] = e.cluster.workers;
  summary["seed"] = e.run.seed;
  summary["steps_planned"] = e.run.steps;
  summary["steps_completed"] = last.step;
  if (tally.resumed_from_step > 0) summary["resumed_from_step"] = tally.resumed_from_step;
  if (tally.status == "diverged") summary["divergence"] = tally.divergence;
  if (tally.status == "interrupted") {
    // Signal 0: a driven run (RunSession) closed before its last step.
    summary["signal"] = tally.signal != 0 ? signal_name(tally.signal) : "none (closed early)";
  }
  if (tally.status == "failed") summary["failure"] = tally.failure;
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
               run.experiment.run.name.c_str(), tally.status.c_str(),
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
    std::fprintf(stderr, ", simulated time %s", human_duration(last.sim_time_s).c_str());
  }
  std::fprintf(stderr, "\n");
  if (tally.status == "diverged") {
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
  return tally.status == "diverged"      ? 3
         : tally.status == "failed"      ? kExitIoError
         : tally.status == "interrupted" ? 128 + tally.signal
                                         : 0;
}

// The exit status of a run that ended as `summary` says (exit_status_of's
// mapping, the signal read back from its name).
int exit_status_of_summary(const Json& summary) {
  RunTally ended;
  ended.status = summary.value("status", "");
  const std::string name = summary.value("signal", "");
  for (const int sig : kStopSignals) {
    if (name == signal_name(sig)) ended.signal = sig;
  }
  return exit_status_of(ended);
}

// ---------------------------------------------------------------------------
// The twin baseline (RunSettings::baseline "twin", docs/results.md "A twin
// baseline"): the optimizer's uncompressed twin on the same problem, cluster
// and seed, run first into <dir>/twin/ (kept when a resumed run finds it
// completed); its summary is set beside the run's.

Json run_twin(const RunContext& run) {
  const fs::path dir = fs::path(run.dir) / "twin";
  std::error_code ec;
  if (fs::exists(dir / "summary.json", ec)) {
    const Json done = load_json_file((dir / "summary.json").string());
    if (done.value("status", "") == "completed") return done;
  }
  fs::remove_all(dir, ec);
  const Experiment twin = twin_experiment(run.experiment);
  if (!run.options.quiet) {
    std::fprintf(stderr, "bitlab: the twin baseline first: %s, into %s\n",
                 twin.optimizer.at("name").get<std::string>().c_str(), dir.c_str());
  }
  RunCliOptions o;
  o.out_dir = dir.string();
  o.quiet = true;
  o.threads = run.options.threads;
  o.command_line = run.options.command_line + "  # its twin baseline";
  o.print_dir = false;
  run_experiment(twin, o);
  return load_json_file((dir / "summary.json").string());
}

double ratio_or_nan(const Json& a, const Json& b) {
  if (!a.is_number() || !b.is_number() || b.get<double>() == 0.0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return a.get<double>() / b.get<double>();
}

// summary.json's "baseline": the twin's outcome and the run's gaps to it
// (run minus twin; ratios run over twin).
Json twin_comparison(const Json& summary, const Json& twin) {
  Json gaps = Json::object();
  for (const auto& [key, value] : summary["final"].items()) {
    const Json& other = twin["final"].value(key, Json());
    if (key != "eval_step" && value.is_number() && other.is_number()) {
      gaps[key] = value.get<double>() - other.get<double>();
    }
  }
  const Json no_time = Json::object();
  const double time_ratio = ratio_or_nan(summary.value("time", no_time).value("sim_time_s", Json()),
                                         twin.value("time", no_time).value("sim_time_s", Json()));
  return {{"kind", "twin"},
          {"dir", "twin"},
          {"optimizer", twin["optimizer"]},
          {"status", twin["status"]},
          {"final", twin["final"]},
          {"gap", gaps},
          {"bytes_ratio", finite_or_null(ratio_or_nan(summary["totals"]["bytes_sent_per_worker"],
                                                      twin["totals"]["bytes_sent_per_worker"]))},
          {"sim_time_ratio", finite_or_null(time_ratio)},
          {"speedup", finite_or_null(1.0 / time_ratio)}};
}

// Rank 0: summary.json, the report on stderr and the folder on stdout. The
// run's exit status (exit_status_of), or kExitIoError when summary.json
// cannot be written. Other ranks: the exit status only.
int finish_run(const RunContext& run, const RunTally& tally, const Json& twin) {
  Json summary = make_summary(run, tally);
  if (!twin.is_null()) summary["baseline"] = twin_comparison(summary, twin);
  const int exit_status = exit_status_of(tally);
  if (!run.writer) return exit_status;
  if (tally.status == "failed") {
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

}  // namespace

ResumePoint resume_point(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  if (!fs::exists(d / "config.json", ec)) {
    throw ConfigError("--resume " + dir + ": holds no run (no config.json)");
  }
  if (fs::exists(d / "summary.json", ec)) {
    const Json summary = load_json_file((d / "summary.json").string());
    const std::string status = summary.value("status", "");
    if (status == "completed") {
      throw ConfigError("--resume " + dir + ": the run already completed; nothing to resume");
    }
    if (status == "diverged") {
      throw ConfigError("--resume " + dir +
                        ": the run diverged; resuming would diverge again (change the "
                        "experiment and start a new run)");
    }
  }
  if (!fs::exists(d / kCheckpointFile, ec)) {
    throw ConfigError("--resume " + dir + ": no " + kCheckpointFile +
                      " (the run was started without --checkpoint-every, or stopped before "
                      "its first checkpoint); start it again");
  }
  if (!fs::is_regular_file(d / kCheckpointFile, ec)) {
    throw ConfigError("--resume " + dir + ": " + (d / kCheckpointFile).string() +
                      " is not a regular file (a folder?); cannot resume");
  }
  ResumePoint point{load_experiment((d / "config.json").string(), {})};
  if (fs::exists(d / "manifest.json", ec)) {
    point.checkpoint_every =
        load_json_file((d / "manifest.json").string()).value("checkpoint_every", int64_t{0});
  }
  return point;
}

std::string make_run_dir(const Experiment& e, const RunCliOptions& o) {
  if (o.resume) return o.out_dir;  // resume_point checked it
  fs::path dir;
  if (!o.out_dir.empty()) {
    dir = o.out_dir;
    std::error_code ec;
    if (fs::exists(dir / "metrics.csv", ec) || fs::exists(dir / "summary.json", ec)) {
      throw ConfigError("--out " + o.out_dir +
                        ": already holds a run (metrics.csv/summary.json); choose another "
                        "folder or delete it");
    }
  } else {
    const fs::path base = fs::path(o.results_root) / e.run.name;
    const std::string stem =
        e.optimizer.at("name").get<std::string>() + "-seed" + std::to_string(e.run.seed);
    dir = base / stem;
    for (int k = 2; fs::exists(dir); ++k) dir = base / (stem + "-" + std::to_string(k));
  }
  create_folder(dir.string(), "results folder");
  return dir.string();
}

int run_experiment(const Experiment& e, const RunCliOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  if (o.transport != nullptr && (o.checkpoint_every > 0 || o.resume || e.run.baseline != "none")) {
    // Each rank holds only its block of workers' state: a checkpoint would
    // need every rank's part gathered (not built yet); a twin would need a
    // second run over the ranks.
    throw ConfigError(
        "--checkpoint-every, --resume and baseline \"twin\": not available with "
        "--backend mpi yet; use the simulator backend (results are "
        "bit-identical)");
  }
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
    std::fprintf(stderr,
                 "bitlab: the twin baseline ended %s (%s/twin/summary.json); the run "
                 "was not started\n",
                 twin.value("status", "?").c_str(), run.dir.c_str());
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
  if (tally.status == "interrupted") run.transport.exit_after_interrupt(exit_status);
  return exit_status;
}

// ---------------------------------------------------------------------------
// RunSession (run.hpp): the same steps, driven from outside.

struct RunSession::Impl {
  Impl(const Experiment& e, const RunCliOptions& o, std::unique_ptr<Problem> problem)
      : experiment(e),
        options(o),
        sim(experiment, std::move(problem)),
        run(experiment, options, sim),
        progress(e.run.steps, o.quiet) {}
  Experiment experiment;
  RunCliOptions options;
  Simulation sim;
  RunContext run;
  std::optional<FolderLock> lock;
  RunFiles files;
  RunTally tally;
  Progress progress;
  bool ended = false, finished = false;
};

RunSession::RunSession(const Experiment& e, const RunCliOptions& o,
                       std::unique_ptr<Problem> problem) {
  if (o.transport != nullptr || e.run.baseline != "none") {
    throw ConfigError("baseline = \"" + e.run.baseline +
                          "\": a twin baseline is not available in a driven run (bitlab.torch); "
                          "run the twin as a second Simulation",
                      "baseline");
  }
  if (o.threads > 0) omp_set_num_threads(o.threads);
  g_interrupted.store(0);  // a signal an earlier CLI run in this process saw is not ours
  impl_ = std::make_unique<Impl>(e, o, std::move(problem));
  Impl& s = *impl_;
  s.run.dir = make_run_dir(s.experiment, s.options);
  s.lock.emplace(s.run.dir, ".bitlab.lock", "bitlab run of " + e.run.name + " (Python)");
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
    throw ConfigError("the run has ended (" + s.tally.status + ", " +
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
  if (!s.ended && s.tally.status == "completed") {
    s.tally.status = "interrupted";
    s.tally.signal = 0;
    checkpoint_if_due(s.run, s.files, s.tally, s.sim.steps_done());
  }
  end_steps(s.files, s.tally, s.progress);
  const int status = finish_run(s.run, s.tally, Json());
  s.lock.reset();
  s.ended = s.finished = true;
  return status;
}

int RunSession::fail(const std::string& why) {
  Impl& s = *impl_;
  if (s.finished) throw ConfigError("the run is already finished: " + s.run.dir);
  s.tally.status = "failed";
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
const std::string& RunSession::status() const { return impl_->tally.status; }
bool RunSession::ended() const { return impl_->ended; }
bool RunSession::finished() const { return impl_->finished; }

}  // namespace bitlab
