// Checkpoints (docs/results.md "Checkpoints"): checkpoint.bin holds the
// simulation's state (sim/engine/simulation.hpp) after the run's own part:
// the format, the bitlab that wrote it, the experiment it belongs to, where
// each csv ended, and the tally; last, a seal (a checksum of every byte
// before it). A checkpoint is refused (ConfigError, nothing changed) unless
// all of it checks: the seal, the version, the experiment, every length
// against the file's size, and what it says against the run's own files.
//
// Under MPI each rank holds its block of the workers' state. The file is then
// the run's part, the rank count ("mpi.ranks") and every rank's simulation
// state as a sealed archive of its own, gathered onto rank 0, which writes
// it. On resume every rank reads the file and loads its own archive: the
// results folder must be on a filesystem every rank sees, as --resume's
// config.json already needs (a cluster's shared home or scratch).

#include "sim/engine/run_parts.hpp"

#include "sim/core/state_archive.hpp"

namespace bitlab::run_parts {

namespace {

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
  if (!run.writer) return;  // rank 0 alone owns the csvs (and its comm log counts them)
  const fs::path dir(run.dir);
  check_csv_at_checkpoint(dir / "metrics.csv", "files.metrics_bytes", files.good_bytes[0],
                          static_cast<uint64_t>(step), step, source);
  check_csv_at_checkpoint(dir / "comm_log.csv", "files.comm_log_bytes", files.good_bytes[1],
                          run.sim.collectives(), 0, source);
}

// Every rank's `mine`, gathered onto rank 0 in rank order (rank 0's own
// included); empty on the other ranks. The sizes go to every rank first
// (allgatherv), then each rank sends its bytes to rank 0 (alltoallv).
std::vector<std::string> gather_on_rank0(Transport& t, const std::string& mine) {
  const auto n = static_cast<size_t>(t.ranks()), me = static_cast<size_t>(t.rank());
  std::vector<int64_t> sizes(n, 0), counts(n, 8), displs(n);
  sizes[me] = static_cast<int64_t>(mine.size());
  for (size_t p = 0; p < n; ++p) displs[p] = static_cast<int64_t>(8 * p);
  t.allgatherv(reinterpret_cast<uint8_t*>(sizes.data()), counts, displs);
  std::vector<int64_t> send_counts(n, 0), send_displs(n, 0), recv_counts(n, 0), recv_displs(n, 0);
  if (me != 0) send_counts[0] = sizes[me];
  int64_t total = 0;
  for (size_t p = 1; me == 0 && p < n; ++p) {
    recv_counts[p] = sizes[p];
    recv_displs[p] = total;
    total += sizes[p];
  }
  std::string others(static_cast<size_t>(total), '\0');
  t.alltoallv(reinterpret_cast<const uint8_t*>(mine.data()), send_counts, send_displs,
              reinterpret_cast<uint8_t*>(others.data()), recv_counts, recv_displs);
  if (me != 0) return {};
  std::vector<std::string> all{mine};
  for (size_t p = 1; p < n; ++p) {
    all.push_back(others.substr(static_cast<size_t>(recv_displs[p]), static_cast<size_t>(sizes[p])));
  }
  return all;
}

// Under MPI: the rank count, then every rank's sealed simulation state (a
// byte list). Saving (rank 0) lists `archives`; loading loads this rank's own
// into the simulation, refusing a file written by another number of ranks.
void ranks_state(StateArchive& io, const RunContext& run, std::vector<std::string>& archives,
                 const std::string& source) {
  uint64_t ranks = archives.size();
  io.count("mpi.ranks", ranks);
  if (io.loading() && ranks != static_cast<uint64_t>(run.transport.ranks())) {
    throw ConfigError(source + ": written by " + std::to_string(ranks) +
                      " MPI ranks, this run has " + std::to_string(run.transport.ranks()) +
                      " (each rank holds its block of the workers); resume it with " +
                      std::to_string(ranks) + " ranks");
  }
  archives.resize(static_cast<size_t>(ranks));
  for (auto& a : archives) {
    std::vector<uint8_t> bytes(a.begin(), a.end());  // binary: a byte list, not text
    io.growing("mpi.rank_state", bytes);
    a.assign(bytes.begin(), bytes.end());
  }
  if (!io.loading()) return;
  const int me = run.transport.rank();
  StateArchive mine(archives[static_cast<size_t>(me)],
                    source + " (rank " + std::to_string(me) + ")");
  if (!mine.verify_seal()) {
    throw ConfigError(source + ": rank " + std::to_string(me) +
                      "'s state: checksum mismatch (the file is damaged); cannot resume");
  }
  run.sim.serialize(mine);
  mine.expect_end();
}

// This rank's simulation state as a sealed archive.
std::string sealed_simulation_state(const RunContext& run) {
  StateArchive io;
  run.sim.serialize(io);
  io.seal();
  return io.bytes();
}

}  // namespace

// Writes checkpoint.bin atomically; returns "" or why it could not. Under MPI
// every rank takes part and every rank gets rank 0's answer.
std::string save_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally) {
  tally.wall_before_s += seconds_since(tally.t0);  // the wall time so far, saved
  tally.t0 = Clock::now();
  std::vector<std::string> archives;
  if (run.measured) archives = gather_on_rank0(run.transport, sealed_simulation_state(run));
  std::string failure;
  if (run.writer) {
    StateArchive io;
    run_state(io, run, files, tally);
    if (run.measured) {
      ranks_state(io, run, archives, "");
    } else {
      run.sim.serialize(io);
    }
    io.seal();
    try {
      write_text_atomic(checkpoint_path(run).string(), io.bytes());
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (run.measured && run.transport.max(failure.empty() ? 0.0 : 1.0) > 0.0 && failure.empty()) {
    failure = "rank 0 could not write " + checkpoint_path(run).string();
  }
  return failure;
}

// Restores the state of checkpoint.bin, then cuts each csv back to where it
// ended at the checkpoint (rows a killed run wrote after it go) and reopens it
// for appending. Throws ConfigError before changing any file.
void resume_from_checkpoint(const RunContext& run, RunFiles& files, RunTally& tally) {
  const fs::path path = checkpoint_path(run);
  std::string refused;
  try {
    StateArchive io(read_checkpoint(path), path.string());
    run_state(io, run, files, tally);
    if (run.measured) {
      std::vector<std::string> archives;
      ranks_state(io, run, archives, path.string());
    } else {
      run.sim.serialize(io);
    }
    io.expect_end();
    check_loaded_checkpoint(run, files, tally);
  } catch (const ConfigError& e) {
    if (!run.measured) throw;
    refused = e.what();
    // Rank 0 prints the error it ends with; another rank says its own here.
    if (!run.writer) {
      std::fprintf(stderr, "bitlab: error: rank %d: %s\n", run.transport.rank(), refused.c_str());
    }
  }
  // Under MPI a rank that refused (its own block damaged; rank 0's csvs) stops
  // every rank, before any file changes.
  if (run.measured && run.transport.max(refused.empty() ? 0.0 : 1.0) > 0.0) {
    throw ConfigError(refused.empty() ? path.string() + ": refused by another rank" : refused);
  }
  if (!run.writer) {
    // Rank 0 alone writes the csvs: the others only needed the state.
    tally.resumed_from_step = run.sim.steps_done();
    return;
  }
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

}  // namespace bitlab::run_parts

namespace bitlab {

using run_parts::kCheckpointFile;
namespace fs = std::filesystem;

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

Experiment experiment_to_resume(RunOptions& options) {
  ResumePoint point = resume_point(options.out_dir);
  options.resume = true;
  if (options.checkpoint_every == 0) options.checkpoint_every = point.checkpoint_every;
  return std::move(point.experiment);
}

}  // namespace bitlab
