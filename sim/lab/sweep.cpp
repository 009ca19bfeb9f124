// Sweeps (sim/lab/sweep.hpp): resolution of the sweep file into runs, and the
// scheduler that runs each in a child `bitlab run` process.
#include "sim/lab/sweep.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "sim/comm/launcher.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

const std::vector<std::string> kSweepKeys = {"name", "description", "base", "grid", "zip", "seeds"};

void check_path_syntax(const std::string& section, const std::string& path, const Json& value) {
  if (path.empty() || path.front() == '.' || path.back() == '.' ||
      path.find("..") != std::string::npos) {
    config_fail(section + "." + path, value,
                "the key must be a config path such as optimizer.lr (no empty parts)");
  }
}

// Reads a {path: [values...]} section.
std::vector<std::pair<std::string, std::vector<Json>>> read_lists(const Json& raw,
                                                                  const std::string& section) {
  std::vector<std::pair<std::string, std::vector<Json>>> out;
  if (!raw.contains(section)) return out;
  const Json& s = raw.at(section);
  if (!s.is_object()) {
    config_fail(section, s, "must be an object {\"config.path\": [values...]}");
  }
  for (const auto& [path, list] : s.items()) {
    check_path_syntax(section, path, list);
    if (!list.is_array() || list.empty()) {
      config_fail(section + "." + path, list, "must be a non-empty list of values");
    }
    out.emplace_back(path, std::vector<Json>(list.begin(), list.end()));
  }
  return out;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '=' || c == '-' || c == '+';
    out += ok ? c : '-';
  }
  return out;
}

std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// A number or string from a summary.json value; "" when absent or null.
std::string summary_cell(const Json& j) {
  if (j.is_null()) return "";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

int machine_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

volatile std::sig_atomic_t g_sweep_interrupted = 0;
extern "C" void on_sweep_sigint(int) {
  g_sweep_interrupted = 1;
}

// How one run ended (or was found at --resume).
struct Outcome {
  bool done = false;     // has a row in sweep.csv
  bool skipped = false;  // finished before this invocation (--resume)
  std::string status;    // completed, diverged, interrupted, failed
  int exit_code = 0;
  Json summary;  // null when the run left none
};

Json read_summary(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "summary.json", ec)) return nullptr;
  try {
    std::ifstream in(dir / "summary.json");
    return Json::parse(in);
  } catch (const std::exception&) {
    return nullptr;
  }
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

class SweepRunner {
 public:
  SweepRunner(const SweepSpec& spec, const SweepOptions& o, fs::path dir)
      : spec_(spec),
        o_(o),
        dir_(std::move(dir)),
        outcomes_(spec.runs.size()),
        csv_name_(o.shards > 0 ? shard_csv_name(o.shard, o.shards) : "sweep.csv") {}

  int run();
  // --merge: the outcomes from the shards' csvs, then sweep.csv.
  int merge();

 private:
  void launch(size_t i, int threads);
  void finish(size_t i, int raw_status);
  void write_csv() const;
  void progress(bool force);
  void final_report(double wall_s);
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
  std::vector<Outcome> outcomes_;
  std::map<pid_t, size_t> running_;
  int finished_now_ = 0;  // finished in this invocation
  int to_run_ = 0;
  Clock::time_point t0_ = Clock::now();
  Clock::time_point last_progress_ = Clock::now() - std::chrono::hours(1);
  bool tty_ = isatty(STDERR_FILENO) != 0;
  bool progress_shown_ = false;
  std::string csv_name_;
};

void SweepRunner::launch(size_t i, int threads) {
  const SweepRun& r = spec_.runs[i];
  const fs::path run_dir = dir_ / r.dir_name;
  std::error_code ec;
  fs::remove_all(run_dir, ec);
  fs::create_directories(run_dir, ec);
  if (ec) throw std::runtime_error("cannot create " + run_dir.string() + ": " + ec.message());
  {
    std::ofstream out(run_dir / "run.json");
    out << r.config.dump(2) << "\n";
  }
  const std::vector<std::string> args = {
      o_.binary, "run",       (run_dir / "run.json").string(), "--out", run_dir.string(),
      "--quiet", "--threads", std::to_string(threads)};
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const std::string err_path = (run_dir / "stderr.txt").string();
  // The child is a plain process, not a rank: it does not inherit the MPI
  // launcher's variables (under `mpirun … bitlab sweep --shard auto`, `bitlab
  // run` would otherwise take itself for an MPI rank).
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (!is_launcher_variable(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
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
    execve(args[0].c_str(), argv.data(), envp.data());
    static const char kMsg[] = "bitlab sweep: exec of the bitlab binary failed\n";
    (void)!write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
    _exit(1);
  }
  running_[pid] = i;
}

void SweepRunner::finish(size_t i, int raw) {
  Outcome& out = outcomes_[i];
  out.done = true;
  out.exit_code = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + (WIFSIGNALED(raw) ? WTERMSIG(raw) : 0);
  out.summary = read_summary(dir_ / spec_.runs[i].dir_name);
  const bool known = out.exit_code == 0 || out.exit_code == 3 || out.exit_code == 130;
  if (known && out.summary.is_object() && out.summary.contains("status")) {
    out.status = out.summary["status"].get<std::string>();
  } else if (WIFSIGNALED(raw) && WTERMSIG(raw) == SIGINT) {
    out.status = "interrupted";
  } else {
    out.status = "failed";
  }
  ++finished_now_;
}

void SweepRunner::write_csv() const {
  // Final eval columns: union over the runs' summaries, in first-seen order.
  std::vector<std::string> evals;
  bool timed = false;
  for (const auto& out : outcomes_) {
    if (!out.done || !out.summary.is_object()) continue;
    if (out.summary.contains("final") && out.summary["final"].is_object()) {
      for (const auto& [k, v] : out.summary["final"].items()) {
        if (k == "train_loss" || k == "grad_norm" || k == "eval_step") continue;
        if (std::find(evals.begin(), evals.end(), k) == evals.end()) evals.push_back(k);
      }
    }
    if (out.summary.contains("time")) timed = true;
  }
  std::ostringstream csv;
  csv << "run";
  for (const auto& p : spec_.swept) {
    if (p != "seed") csv << ',' << csv_cell(p);
  }
  csv << ",seed,status,steps_completed,train_loss";
  for (const auto& e : evals) csv << ',' << csv_cell(e);
  csv << ",bytes_sent_per_worker,messages_per_worker";
  if (timed) csv << ",sim_time_s";
  csv << ",wall_s,dir\n";
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    const Outcome& out = outcomes_[i];
    if (!out.done) continue;
    const SweepRun& r = spec_.runs[i];
    csv << r.index;
    for (const auto& p : spec_.swept) {
      if (p == "seed") continue;
      for (const auto& [path, value] : r.assignments) {
        if (path == p) csv << ',' << csv_cell(sweep_value_text(value));
      }
    }
    csv << ',' << r.config.value("seed", Json(0)).dump() << ',' << out.status;
    const Json& s = out.summary.is_object() ? out.summary : Json::object();
    auto get = [&](const char* section, const std::string& key) -> std::string {
      if (!s.contains(section) || !s[section].is_object() || !s[section].contains(key)) return "";
      return csv_cell(summary_cell(s[section][key]));
    };
    csv << ',' << (s.contains("steps_completed") ? summary_cell(s["steps_completed"]) : "");
    csv << ',' << get("final", "train_loss");
    for (const auto& e : evals) csv << ',' << get("final", e);
    csv << ',' << get("totals", "bytes_sent_per_worker") << ','
        << get("totals", "messages_per_worker");
    if (timed) csv << ',' << get("time", "sim_time_s");
    csv << ',' << (s.contains("wall_s") ? summary_cell(s["wall_s"]) : "") << ','
        << csv_cell(r.dir_name) << '\n';
  }
  write_text_atomic(dir_ / csv_name_, csv.str());
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
    const Outcome& out = outcomes_[i];
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
  }
  std::fprintf(stderr, "  results: %s\n", (dir_ / csv_name_).string().c_str());
}

int SweepRunner::run() {
  const int cores = machine_cores();
  const int jobs = std::max(1, o_.jobs > 0 ? o_.jobs : cores);
  const int threads = std::max(1, cores / jobs);

  // --resume: finished runs keep their folders and rows.
  std::vector<size_t> pending;
  for (size_t i = 0; i < spec_.runs.size(); ++i) {
    if (!in_shard(i)) continue;  // another shard's run
    if (o_.resume) {
      const Json s = read_summary(dir_ / spec_.runs[i].dir_name);
      const std::string status = s.is_object() ? s.value("status", "") : "";
      if (status == "completed" || status == "diverged") {
        outcomes_[i] = {true, true, status, status == "completed" ? 0 : 3, s};
        continue;
      }
    }
    pending.push_back(i);
  }
  to_run_ = static_cast<int>(pending.size());
  write_csv();

  g_sweep_interrupted = 0;
  struct sigaction sa {
  }, old_sa{};
  sa.sa_handler = on_sweep_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_sa);

  bool forwarded = false;
  size_t next = 0;
  t0_ = Clock::now();
  try {
    while (next < pending.size() || !running_.empty()) {
      if (g_sweep_interrupted && !forwarded) {
        // A terminal's Ctrl-C reaches the children too; a signal sent to the
        // sweep alone is passed on. Either way each child ends its step.
        for (const auto& [pid, i] : running_) kill(pid, SIGINT);
        forwarded = true;
      }
      while (!g_sweep_interrupted && next < pending.size() &&
             static_cast<int>(running_.size()) < jobs) {
        launch(pending[next++], threads);
      }
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
      if (changed) write_csv();
      progress(false);
      if (g_sweep_interrupted && running_.empty()) break;
      if (!changed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  } catch (...) {
    for (const auto& [pid, i] : running_) {
      kill(pid, SIGINT);
      int raw = 0;
      waitpid(pid, &raw, 0);
    }
    sigaction(SIGINT, &old_sa, nullptr);
    throw;
  }
  sigaction(SIGINT, &old_sa, nullptr);
  write_csv();
  progress(true);
  final_report(std::chrono::duration<double>(Clock::now() - t0_).count());
  std::printf("%s\n", dir_.string().c_str());
  std::fflush(stdout);

  if (g_sweep_interrupted) return 130;
  for (const auto& out : outcomes_) {
    if (out.done && out.status != "completed") return 3;
  }
  return 0;
}

// One csv line split into cells (cells quoted as csv_cell writes them).
std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t k = 0; k < line.size(); ++k) {
    const char c = line[k];
    if (quoted) {
      if (c == '"' && k + 1 < line.size() && line[k + 1] == '"') {
        cells.back() += '"';
        ++k;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

int SweepRunner::merge() {
  // Every shard of the count the folder's shard csvs name must be there.
  int shards = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    int i = 0, k = 0;
    if (std::sscanf(name.c_str(), "sweep.shard-%d-of-%d.csv", &i, &k) == 2 &&
        name == shard_csv_name(i, k)) {
      if (shards != 0 && k != shards) {
        throw ConfigError(dir_.string() + ": shard csvs of different shard counts (" +
                          std::to_string(shards) + " and " + std::to_string(k) +
                          "); remove the stale ones");
      }
      shards = k;
    }
  }
  if (shards == 0) {
    throw ConfigError(dir_.string() +
                      ": no shard csv (sweep.shard-<i>-of-<k>.csv) to merge; run "
                      "`bitlab sweep FILE --shard i/k` first");
  }
  for (int s = 0; s < shards; ++s) {
    const fs::path p = dir_ / shard_csv_name(s, shards);
    std::ifstream in(p);
    if (!in) {
      throw ConfigError("--merge: " + p.string() + " is missing: shard " + std::to_string(s) + "/" +
                        std::to_string(shards) + " has not run");
    }
    std::string line;
    std::getline(in, line);
    const auto header = split_csv_line(line);
    const auto status_col = std::find(header.begin(), header.end(), "status") - header.begin();
    while (std::getline(in, line)) {
      const auto cells = split_csv_line(line);
      const int run = std::atoi(cells[0].c_str());
      if (run < 1 || run > static_cast<int>(spec_.runs.size()) ||
          static_cast<size_t>(status_col) >= cells.size()) {
        throw ConfigError("--merge: " + p.string() + ": malformed row: " + line);
      }
      Outcome& out = outcomes_[run - 1];
      out.done = true;
      out.status = cells[status_col];
      out.summary = read_summary(dir_ / spec_.runs[run - 1].dir_name);
    }
  }
  std::string missing;
  int missing_count = 0;
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    if (outcomes_[i].done) continue;
    if (++missing_count <= 5) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(spec_.runs[i].index) + " (shard " +
                 std::to_string(i % shards) + ")";
    }
  }
  if (missing_count > 0) {
    throw ConfigError("--merge: " + std::to_string(missing_count) +
                      " run(s) have no row in their shard's csv (unfinished?): " + missing +
                      (missing_count > 5 ? ", ..." : ""));
  }
  write_csv();
  std::printf("%s\n", dir_.string().c_str());
  std::fflush(stdout);
  for (const auto& out : outcomes_) {
    if (out.status != "completed") return 3;
  }
  return 0;
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

std::string shard_csv_name(int shard, int shards) {
  return "sweep.shard-" + std::to_string(shard) + "-of-" + std::to_string(shards) + ".csv";
}

std::string sweep_value_text(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

SweepSpec resolve_sweep(const Json& raw, const std::string& base_dir,
                        const std::string& default_name, bool check_runs) {
  if (!raw.is_object()) config_fail("", raw, "a sweep must be a JSON object");
  for (const auto& [key, value] : raw.items()) {
    if (std::find(kSweepKeys.begin(), kSweepKeys.end(), key) == kSweepKeys.end()) {
      std::string known;
      for (const auto& k : kSweepKeys) known += (known.empty() ? "" : ", ") + k;
      std::string rule = "unknown key";
      const std::string near = closest_match(key, kSweepKeys);
      if (!near.empty()) rule += "; did you mean \"" + near + "\"?";
      config_fail(key, value, rule + " (known keys: " + known + ")");
    }
  }
  SweepSpec spec;
  spec.name = default_name;
  if (raw.contains("name")) {
    const Json& n = raw["name"];
    if (!n.is_string() || n.get<std::string>().empty()) {
      config_fail("name", n, "must be a non-empty string");
    }
    spec.name = n.get<std::string>();
    if (spec.name.find('/') != std::string::npos || spec.name == "." || spec.name == "..") {
      config_fail("name", n, "must not contain '/' (it names the results folder)");
    }
  }
  if (raw.contains("description")) {
    if (!raw["description"].is_string())
      config_fail("description", raw["description"], "must be a string");
    spec.description = raw["description"].get<std::string>();
  }
  if (!raw.contains("base")) {
    config_fail("base", nullptr,
                "is required: an experiment file (relative to the sweep file) "
                "or an inline experiment object");
  }
  std::string base_name = spec.name;
  const Json& base = raw["base"];
  if (base.is_string()) {
    fs::path p = base.get<std::string>();
    if (p.is_relative()) p = fs::path(base_dir) / p;
    try {
      spec.base = load_json_file(p.string());
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("base = ") + show_value(base) + ": " + e.what(), "base");
    }
    base_name = p.stem().string();
  } else if (base.is_object()) {
    spec.base = base;
  } else {
    config_fail("base", base, "must be an experiment file path or an inline experiment object");
  }

  const auto grid = read_lists(raw, "grid");
  const auto zip = read_lists(raw, "zip");
  size_t zip_len = 1;
  for (const auto& [path, values] : zip) {
    if (&zip.front().second == &values) {
      zip_len = values.size();
    } else if (values.size() != zip_len) {
      config_fail("zip." + path, Json(values),
                  "every zip list must have the same length (" + zip.front().first + " has " +
                      std::to_string(zip_len) + ", this has " + std::to_string(values.size()) +
                      ")");
    }
  }
  for (const auto& [path, values] : zip) {
    for (const auto& [gpath, gvalues] : grid) {
      if (gpath == path)
        config_fail("zip." + path, Json(values), "is also in grid: sweep a path in one of them");
    }
  }
  // A swept path inside another swept path ("optimizer" and "optimizer.lr")
  // would be silently overwritten by the whole object, depending on order.
  {
    std::vector<std::pair<std::string, std::string>> all;  // path, where
    for (const auto& [path, values] : grid) all.emplace_back(path, "grid." + path);
    for (const auto& [path, values] : zip) all.emplace_back(path, "zip." + path);
    for (const auto& [a, where_a] : all) {
      for (const auto& [b, where_b] : all) {
        if (b.size() > a.size() && b.compare(0, a.size() + 1, a + ".") == 0) {
          config_fail(where_b, Json(nullptr),
                      "lies inside the also swept " + where_a +
                          ": the whole object would overwrite it; sweep the inner value inside "
                          "the object's list instead");
        }
      }
    }
  }
  std::vector<Json> seeds;
  if (raw.contains("seeds")) {
    const Json& s = raw["seeds"];
    if (!s.is_array() || s.empty()) config_fail("seeds", s, "must be a non-empty list of seeds");
    for (size_t k = 0; k < s.size(); ++k) {
      if (!s[k].is_number_integer() ||
          (s[k].is_number_integer() && !s[k].is_number_unsigned() && s[k].get<int64_t>() < 0)) {
        config_fail("seeds[" + std::to_string(k) + "]", s[k], "must be an integer >= 0");
      }
    }
    seeds.assign(s.begin(), s.end());
    for (const auto& [path, values] : grid) {
      if (path == "seed")
        config_fail("grid.seed", Json(values), "conflicts with \"seeds\": use one");
    }
    for (const auto& [path, values] : zip) {
      if (path == "seed")
        config_fail("zip.seed", Json(values), "conflicts with \"seeds\": use one");
    }
  }
  for (const auto& [path, values] : grid) spec.swept.push_back(path);
  for (const auto& [path, values] : zip) spec.swept.push_back(path);
  if (!seeds.empty()) spec.swept.push_back("seed");

  // Cartesian product: grid (first key slowest) × zip tuples × seeds (fastest).
  size_t grid_count = 1;
  for (const auto& [path, values] : grid) grid_count *= values.size();
  const size_t zip_count = zip.empty() ? 1 : zip_len;
  const size_t seed_count = seeds.empty() ? 1 : seeds.size();
  const size_t total = grid_count * zip_count * seed_count;
  if (total > 100000) config_fail("grid", raw.value("grid", Json()), "makes more than 100000 runs");
  const size_t width = std::max<size_t>(3, std::to_string(total).size());

  std::set<std::string> checked;  // problem+cluster+optimizer sections already built
  for (size_t n = 0; n < total; ++n) {
    SweepRun r;
    r.index = static_cast<int>(n + 1);
    size_t g = n / (zip_count * seed_count);
    const size_t z = (n / seed_count) % zip_count;
    const size_t s = n % seed_count;
    // Mixed radix, last grid key fastest.
    std::vector<size_t> gi(grid.size());
    for (size_t k = grid.size(); k-- > 0;) {
      gi[k] = g % grid[k].second.size();
      g /= grid[k].second.size();
    }
    for (size_t k = 0; k < grid.size(); ++k)
      r.assignments.emplace_back(grid[k].first, grid[k].second[gi[k]]);
    for (const auto& [path, values] : zip) r.assignments.emplace_back(path, values[z]);
    if (!seeds.empty()) r.assignments.emplace_back("seed", seeds[s]);

    std::string idx = std::to_string(r.index);
    idx = std::string(width - idx.size(), '0') + idx;
    r.dir_name = "run-" + idx;
    for (const auto& [path, value] : r.assignments) {
      r.label += (r.label.empty() ? "" : ", ") + path + "=" + sweep_value_text(value);
      r.dir_name += "_" + sanitize(path + "=" + sweep_value_text(value));
    }
    if (r.dir_name.size() > 120) r.dir_name.resize(120);
    const std::string who = "run " + std::to_string(r.index) +
                            (r.label.empty() ? std::string() : " (" + r.label + ")") + ": ";
    try {
      Json exp = spec.base;
      for (const auto& [path, value] : r.assignments) set_json_path(exp, path, value);
      Experiment e = resolve_experiment(exp, base_name);
      r.config = e.resolved;
      if (check_runs) {
        // Building the problem and shards checks the data-dependent rules;
        // seeds change only the draws, so one build per configuration.
        const std::string key_no_seed =
            e.problem.dump() + e.resolved.value("cluster", Json()).dump() + e.optimizer.dump();
        if (checked.insert(key_no_seed).second) Simulation sim(e);
      }
    } catch (const ConfigError& e) {
      throw ConfigError(who + e.what(), e.path());
    }
    spec.runs.push_back(std::move(r));
  }
  return spec;
}

SweepSpec load_sweep(const std::string& file) {
  const Json raw = load_json_file(file);
  const fs::path p(file);
  return resolve_sweep(raw, p.parent_path().string(), p.stem().string());
}

int run_sweep(const SweepSpec& spec, const SweepOptions& o) {
  const fs::path dir =
      o.out_dir.empty() ? fs::path(o.results_root) / spec.name : fs::path(o.out_dir);
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
  if (exists) {
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
  if (o.merge) {
    SweepRunner runner(spec, o, dir);
    return runner.merge();
  }
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("cannot create sweep folder " + dir.string() + ": " + ec.message());
  write_text_atomic(dir / "sweep.json", sweep_json.dump(2) + "\n");

  SweepRunner runner(spec, o, dir);
  return runner.run();
}

}  // namespace bitlab
