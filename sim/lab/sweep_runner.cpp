// The sweep runner (sim/lab/sweep.hpp): checks the sweep folder, then runs
// each run of the sweep (or of its shard) in a child `bitlab run` process, up
// to --jobs at once, with progress, Ctrl-C and a final report.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "sim/comm/launcher.hpp"
#include "sim/core/files.hpp"
#include "sim/core/threads.hpp"
#include "sim/engine/run.hpp"
#include "sim/lab/sweep.hpp"
#include "sim/lab/sweep_csv.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

// The stop signal received (SIGINT, SIGTERM or SIGHUP), 0 if none.
volatile std::sig_atomic_t g_sweep_interrupted = 0;
extern "C" void on_sweep_sigint(int sig) {
  g_sweep_interrupted = sig;
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 100) {
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  } else if (s < 6000) {
    std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  } else {
    std::snprintf(buf, sizeof buf, "%.1fh", s / 3600);
  }
  return buf;
}

// ---------------------------------------------------------------------------
// Child processes

// The run's folder, emptied, holding run.json: the experiment the child runs.
void prepare_run_dir(const fs::path& run_dir, const Json& config) {
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  // A full disk: IoError, and the sweep stops with exit 4 (an unchecked
  // stream would hand the child an empty run.json: exit 2, "bad input").
  create_folder(run_dir.string(), "run folder");
  write_text_atomic((run_dir / "run.json").string(), config.dump(2) + "\n");
}

// This process's environment less the MPI launcher's variables: the child is
// a plain process, not a rank (under `mpirun … bitlab sweep --shard auto`,
// `bitlab run` would otherwise take itself for an MPI rank).
std::vector<std::string> child_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!is_launcher_variable(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  return env;
}

// Starts `args` (args[0]: the binary) with `env`, stdout to /dev/null and
// stderr to `err_path`. Returns the child's pid.
pid_t spawn(const std::vector<std::string>& args, std::vector<std::string> env,
            const std::string& err_path) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    const int null_fd = open("/dev/null", O_WRONLY);
    const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (null_fd >= 0) dup2(null_fd, STDOUT_FILENO);
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execve(args[0].c_str(), argv.data(), envp.data());
    static const char kMsg[] = "bitlab sweep: exec of the bitlab binary failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(1);
  }
  return pid;
}

// ---------------------------------------------------------------------------
// The scheduler

class SweepRunner {
 public:
  SweepRunner(const SweepSpec& spec, const SweepOptions& o, fs::path dir)
      : spec_(spec),
        o_(o),
        dir_(std::move(dir)),
        outcomes_(spec.runs.size()),
        csv_name_(sweep_csv_name(o)) {}

  int run();

 private:
  std::vector<size_t> pending_runs();
  void schedule(const std::vector<size_t>& pending, int jobs, int threads);
  void launch(size_t i, int threads);
  bool reap_finished();
  void finish(size_t i, int raw_status);
  void stop_children();
  void write_csv() const { write_sweep_csv(spec_, outcomes_, (dir_ / csv_name_).string()); }
  void progress(bool force);
  void final_report(double wall_s);
  void report_warnings() const;
  int exit_status() const;
  // Run i belongs to this invocation's shard (always, without --shard).
  bool in_shard(size_t i) const {
    return o_.shards == 0 || static_cast<int>(i % static_cast<size_t>(o_.shards)) == o_.shard;
  }
  int shard_size() const {
    int n = 0;
    for (size_t i = 0; i < outcomes_.size(); ++i) n += in_shard(i) ? 1 : 0;
    return n;
  }

  const SweepSpec& spec_;
  const SweepOptions& o_;
  fs::path dir_;
  std::vector<SweepOutcome> outcomes_;
  std::map<pid_t, size_t> running_;
  int finished_now_ = 0;  // finished in this invocation
  Clock::time_point t0_ = Clock::now();
  Clock::time_point last_progress_ = Clock::now() - std::chrono::hours(1);
  bool tty_ = isatty(STDERR_FILENO) != 0;
  bool progress_shown_ = false;
  std::string csv_name_;
};

int SweepRunner::run() {
  const int cores = machine_cores();
  const int jobs = std::max(1, o_.jobs > 0 ? o_.jobs : cores);
  const int threads = threads_per_job(jobs, o_.threads, cores);
  const std::vector<size_t> pending = pending_runs();
  write_csv();

  // Ctrl-C, and a scheduler's SIGTERM (time limit, preemption) or SIGHUP: the
  // children end their step, sweep.csv is rewritten, --resume picks up.
  g_sweep_interrupted = 0;
  constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
  struct sigaction sa {
  }, old_sa[3]{};
  sa.sa_handler = on_sweep_sigint;
  sigemptyset(&sa.sa_mask);
  for (int k = 0; k < 3; ++k) sigaction(kStopSignals[k], &sa, &old_sa[k]);
  const auto restore = [&] {
    for (int k = 0; k < 3; ++k) sigaction(kStopSignals[k], &old_sa[k], nullptr);
  };
  t0_ = Clock::now();
  try {
    schedule(pending, jobs, threads);
  } catch (...) {
    stop_children();
    restore();
    throw;
  }
  restore();

  write_csv();
  progress(true);
  final_report(std::chrono::duration<double>(Clock::now() - t0_).count());
  std::printf("%s\n", dir_.string().c_str());
  std::fflush(stdout);
  return exit_status();
}

// The runs of this shard to run now. With --resume, finished runs keep their
// folders and rows.
std::vector<size_t> SweepRunner::pending_runs() {
  std::vector<size_t> pending;
  for (size_t i = 0; i < spec_.runs.size(); ++i) {
    if (!in_shard(i)) continue;  // another shard's run
    if (o_.resume) {
      const Json s = read_run_summary(dir_ / spec_.runs[i].dir_name);
      const std::string status = s.is_object() ? s.value("status", "") : "";
      if (status == "completed" || status == "diverged") {
        outcomes_[i] = {true, true, status, status == "completed" ? 0 : 3, s};
        continue;
      }
    }
    pending.push_back(i);
  }
  return pending;
}

// Keeps up to `jobs` children running until every pending run finished, or,
// after Ctrl-C, until the running children ended.
void SweepRunner::schedule(const std::vector<size_t>& pending, int jobs, int threads) {
  bool forwarded = false;
  size_t next = 0;
  while (next < pending.size() || !running_.empty()) {
    if (g_sweep_interrupted && !forwarded) {
      // A terminal's Ctrl-C reaches the children too; a signal sent to the
      // sweep alone is passed on, as the same signal. Either way each child
      // ends its step.
      for (const auto& [pid, i] : running_) kill(pid, static_cast<int>(g_sweep_interrupted));
      forwarded = true;
    }
    while (!g_sweep_interrupted && next < pending.size() &&
           static_cast<int>(running_.size()) < jobs) {
      launch(pending[next++], threads);
    }
    const bool changed = reap_finished();
    if (changed) write_csv();
    progress(false);
    if (g_sweep_interrupted && running_.empty()) break;
    if (!changed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void SweepRunner::launch(size_t i, int threads) {
  const SweepRun& r = spec_.runs[i];
  const fs::path run_dir = dir_ / r.dir_name;
  std::vector<std::string> args = {o_.binary, "run", "--quiet", "--threads",
                                   std::to_string(threads)};
  std::error_code ec;
  if (o_.resume && fs::exists(run_dir / "checkpoint.bin", ec)) {
    // Half finished (pending_runs skipped the finished ones): continue it.
    args.insert(args.end(), {"--resume", run_dir.string()});
  } else {
    prepare_run_dir(run_dir, r.config);
    args.insert(args.end(), {(run_dir / "run.json").string(), "--out", run_dir.string()});
  }
  if (o_.checkpoint_every > 0) {
    args.insert(args.end(), {"--checkpoint-every", std::to_string(o_.checkpoint_every)});
  }
  running_[spawn(args, child_environment(), (run_dir / "stderr.txt").string())] = i;
}

// Collects the children that have ended. Returns whether any had.
bool SweepRunner::reap_finished() {
  bool changed = false;
  for (auto it = running_.begin(); it != running_.end();) {
    int raw = 0;
    const pid_t got = waitpid(it->first, &raw, WNOHANG);
    if (got == it->first) {
      finish(it->second, raw);
      it = running_.erase(it);
      changed = true;
    } else {
      ++it;
    }
  }
  return changed;
}

void SweepRunner::finish(size_t i, int raw) {
  SweepOutcome& out = outcomes_[i];
  out.done = true;
  out.exit_code = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0);
  out.summary = read_run_summary(dir_ / spec_.runs[i].dir_name);
  const bool known = out.exit_code == 0 || out.exit_code == 3 || out.exit_code == kExitIoError ||
                     out.exit_code == 128 + SIGINT || out.exit_code == 128 + SIGTERM ||
                     out.exit_code == 128 + SIGHUP;
  if (known && out.summary.is_object() && out.summary.contains("status")) {
    out.status = out.summary["status"].get<std::string>();
  } else if (WIFSIGNALED(raw) &&
             (WTERMSIG(raw) == SIGINT || WTERMSIG(raw) == SIGTERM || WTERMSIG(raw) == SIGHUP)) {
    out.status = "interrupted";
  } else {
    out.status = "failed";
  }
  ++finished_now_;
}

// On an error: each running child ends its step, and is waited for.
void SweepRunner::stop_children() {
  for (const auto& [pid, i] : running_) {
    kill(pid, SIGINT);
    int raw = 0;
    waitpid(pid, &raw, 0);
  }
}

void SweepRunner::progress(bool force) {
  if (o_.quiet) return;
  const auto now = Clock::now();
  const double since = std::chrono::duration<double>(now - last_progress_).count();
  if (!force && since < (tty_ ? 0.2 : o_.progress_every_s)) return;
  last_progress_ = now;
  int done = 0, failed = 0, diverged = 0;
  for (const auto& out : outcomes_) {
    if (!out.done) continue;
    ++done;
    if (out.status == "failed") ++failed;
    if (out.status == "diverged") ++diverged;
  }
  const int total = shard_size();
  std::string line = "[sweep] " + std::to_string(done) + "/" + std::to_string(total) + " done, " +
                     std::to_string(running_.size()) + " running";
  if (failed) line += ", " + std::to_string(failed) + " failed";
  if (diverged) line += ", " + std::to_string(diverged) + " diverged";
  const int remaining = total - done;
  if (finished_now_ > 0 && remaining > 0) {
    // Throughput so far in this invocation, assuming the pending runs cost the same.
    const double elapsed = std::chrono::duration<double>(now - t0_).count();
    line += ", ETA " + format_duration(elapsed / finished_now_ * remaining);
  }
  if (tty_) {
    std::fprintf(stderr, "\r%-70s", line.c_str());
    progress_shown_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

void SweepRunner::final_report(double wall_s) {
  if (o_.quiet) return;
  if (tty_ && progress_shown_) std::fprintf(stderr, "\n");
  std::map<std::string, int> counts;
  int done = 0, skipped = 0;
  for (const auto& out : outcomes_) {
    if (!out.done) continue;
    ++done;
    if (out.skipped) ++skipped;
    counts[out.status] += 1;
  }
  std::string tally;
  for (const char* s : {"completed", "diverged", "failed", "interrupted"}) {
    if (counts[s])
      tally += std::string(tally.empty() ? "" : ", ") + std::to_string(counts[s]) + " " + s;
  }
  std::fprintf(
      stderr, "[sweep] %s: %d/%d runs in %s: %s%s\n", spec_.name.c_str(), done, shard_size(),
      format_duration(wall_s).c_str(), tally.empty() ? "none finished" : tally.c_str(),
      skipped ? (" (" + std::to_string(skipped) + " finished before, skipped)").c_str() : "");
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    const SweepOutcome& out = outcomes_[i];
    if (!out.done || out.status == "completed") continue;
    const SweepRun& r = spec_.runs[i];
    std::string extra;
    if (out.status == "failed") {
      extra = " (exit " + std::to_string(out.exit_code) + "; see stderr.txt)";
    } else if (out.status == "diverged" && out.summary.contains("divergence")) {
      extra = " (at step " + summary_cell(out.summary["divergence"].value("step", Json())) + ")";
    }
    std::fprintf(stderr, "  %s: run %d (%s)%s: %s\n", out.status.c_str(), r.index, r.label.c_str(),
                 extra.c_str(), (dir_ / r.dir_name).string().c_str());
    const std::string hint =
        out.status == "diverged" && out.summary.contains("divergence") &&
                out.summary["divergence"].is_object()
            ? summary_cell(out.summary["divergence"].value("hint", Json()))
            : "";
    if (hint.rfind("likely cause: ", 0) == 0) {
      // The cause the run saw, without the generic advice that follows it.
      std::fprintf(stderr, "    %s\n", hint.substr(0, hint.find("; otherwise ")).c_str());
    }
  }
  report_warnings();
  std::fprintf(stderr, "  results: %s\n", (dir_ / csv_name_).string().c_str());
}

// The finished runs' warnings (summary.json) grouped by kind (group_warnings:
// one line for a warning whose numbers differ from run to run, with their
// ranges), with how many runs and which raised it, most frequent first.
void SweepRunner::report_warnings() const {
  std::vector<std::pair<int, std::vector<std::string>>> per_run;
  int runs_warned = 0;
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    if (!outcomes_[i].done) continue;
    per_run.emplace_back(spec_.runs[i].index, run_warnings(outcomes_[i].summary));
    runs_warned += per_run.back().second.empty() ? 0 : 1;
  }
  const std::vector<WarningGroup> groups = group_warnings(per_run);
  if (groups.empty()) return;
  std::fprintf(stderr, "  warnings (%zu kind%s, in %d of %d runs; sweep.csv's warnings column "
               "has each run's own):\n",
               groups.size(), groups.size() == 1 ? "" : "s", runs_warned, shard_size());
  constexpr size_t kShownRuns = 8;
  for (const auto& g : groups) {
    std::string which;
    for (size_t k = 0; k < g.runs.size() && k < kShownRuns; ++k) {
      which += (k ? ", " : "") + std::to_string(g.runs[k]);
    }
    if (g.runs.size() > kShownRuns) which += ", ...";
    std::fprintf(stderr, "    in %zu run%s (%s%s): %s\n", g.runs.size(),
                 g.runs.size() == 1 ? "" : "s", g.runs.size() == 1 ? "run " : "runs ",
                 which.c_str(), g.text.c_str());
  }
}

// A signal first; then a run that could not write its results (exit 4: the
// disk is full for the runs after it too); then any other unfinished run.
int SweepRunner::exit_status() const {
  if (g_sweep_interrupted) return 128 + static_cast<int>(g_sweep_interrupted);
  int status = 0;
  for (const auto& out : outcomes_) {
    if (!out.done || out.status == "completed") continue;
    if (out.exit_code == kExitIoError) return kExitIoError;
    status = 3;
  }
  return status;
}

// ---------------------------------------------------------------------------
// The sweep folder

// sweep.json: the resolved sweep, every run's assignments and folder.
Json describe_sweep(const SweepSpec& spec) {
  Json sweep_json = Json::object();
  sweep_json["name"] = spec.name;
  sweep_json["description"] = spec.description;
  sweep_json["base"] = spec.base;
  sweep_json["swept"] = spec.swept;
  Json runs = Json::array();
  for (const auto& r : spec.runs) {
    Json a = Json::object();
    for (const auto& [path, value] : r.assignments) a[path] = value;
    runs.push_back({{"run", r.index}, {"dir", r.dir_name}, {"assignments", a}});
  }
  sweep_json["runs"] = runs;
  sweep_json["warnings"] = spec.warnings;
  return sweep_json;
}

// A folder holding a sweep is refused, unless this invocation continues that
// very sweep (--resume, a shard, --merge).
void check_sweep_folder(const fs::path& dir, const SweepSpec& spec, const Json& sweep_json,
                        const SweepOptions& o) {
  std::error_code ec;
  const bool exists = fs::exists(dir / "sweep.json", ec);
  if (o.merge && !exists) {
    throw ConfigError("--merge: " + dir.string() +
                      " holds no sweep (sweep.json); give the sweep's --out");
  }
  // Shards share the folder: each may find the others' sweep.json.
  const bool shared = o.resume || o.shards > 0 || o.merge;
  if (exists && !shared) {
    throw ConfigError(dir.string() +
                      " already holds a sweep (sweep.json): use --resume to finish it, or choose "
                      "another --out");
  }
  if (!exists) return;
  Json old;
  try {
    std::ifstream in(dir / "sweep.json");
    old = Json::parse(in);
  } catch (const std::exception&) {
    throw ConfigError((dir / "sweep.json").string() + ": unreadable; cannot --resume");
  }
  if (old.value("runs", Json()) != sweep_json["runs"] || old.value("base", Json()) != spec.base) {
    throw ConfigError(dir.string() +
                      " holds a different sweep (its sweep.json has other runs or another "
                      "base): --resume, --shard and --merge need the same sweep file; "
                      "choose another --out");
  }
}

}  // namespace

std::pair<int, int> parse_shard(const std::string& text) {
  int i = -1, k = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%d/%d%c", &i, &k, &tail) != 2 || k < 1 || i < 0 || i >= k) {
    throw ConfigError("--shard " + text + ": must be i/k with 0 <= i < k (0-based shard i of k)");
  }
  return {i, k};
}

int run_sweep(const SweepSpec& spec, const SweepOptions& o) {
  const fs::path dir =
      o.out_dir.empty() ? fs::path(o.results_root) / spec.name : fs::path(o.out_dir);
  const Json sweep_json = describe_sweep(spec);
  check_sweep_folder(dir, spec, sweep_json, o);
  if (o.merge) return merge_shard_csvs(spec, dir, sweep_csv_name(o));
  create_folder(dir.string(), "sweep folder");
  // One process per sweep (or per shard: shards share the folder) at a time: a
  // second `--resume` of the same sweep would re-run the same runs beside it.
  const std::string lock_name =
      o.shards > 0 ? ".bitlab.lock-" + shard_csv_name(o.shard, o.shards) : ".bitlab.lock";
  const FolderLock lock(
      dir.string(), lock_name,
      std::string("bitlab sweep") + (o.resume ? " --resume" : "") + " of " + spec.name);
  try {
    write_text_atomic(dir / "sweep.json", sweep_json.dump(2) + "\n");
  } catch (const IoError&) {
    // A full disk: no folder holding only the lock is left (exit 4).
    std::error_code ignored;
    fs::remove(dir / lock_name, ignored);
    fs::remove(dir, ignored);  // only when empty
    throw;
  }
  SweepRunner runner(spec, o, dir);
  return runner.run();
}

}  // namespace bitlab
