// `bitlab plot RUN_OR_SWEEP_DIR... [--metric M] [--x X] [--out PREFIX] [--title T]
// [--logy]`: a thin wrapper that runs notebooks/plot.py with Debian's
// /usr/bin/python3 (and its python3-matplotlib) and passes its exit status
// through. The script does the work (finding runs, labels, seed bands, PNG and
// SVG) and checks its input before importing matplotlib.
//
// The script is found at $BITLAB_NOTEBOOKS/plot.py when that variable is set,
// else at <folder of the bitlab binary>/../notebooks/plot.py (the build folder
// sits in the repository).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "sim/cli/commands.hpp"

extern char** environ;

namespace bitlab {

namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";

struct PlotFlags {
  std::vector<std::string> dirs;
  std::string metric, x, out, title;
  bool logy = false;
};

// The script's path, or "" after printing what was tried.
std::string find_plot_script() {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("BITLAB_NOTEBOOKS"); env != nullptr && *env != '\0') {
    const fs::path p = fs::path(env) / "plot.py";
    if (fs::is_regular_file(p)) return p.string();
    tried.push_back(p.string() + " (from BITLAB_NOTEBOOKS)");
  } else {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
      const fs::path p = (exe.parent_path() / ".." / "notebooks" / "plot.py").lexically_normal();
      if (fs::is_regular_file(p)) return p.string();
      tried.push_back(p.string() + " (next to the bitlab binary " + exe.string() + ")");
    } else {
      tried.push_back("/proc/self/exe (unreadable: " + ec.message() + ")");
    }
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  std::fprintf(stderr,
               "bitlab: error: cannot find the plotting script notebooks/plot.py; tried %s. Set "
               "BITLAB_NOTEBOOKS to the repository's notebooks/ folder.\n",
               list.c_str());
  return "";
}

int run_plot(const PlotFlags& f) {
  if (access(kPython, X_OK) != 0) {
    std::fprintf(stderr,
                 "bitlab: error: %s is missing: `bitlab plot` needs Debian's Python; install "
                 "the Debian packages python3 and python3-matplotlib (apt-get install python3 "
                 "python3-matplotlib)\n",
                 kPython);
    return 2;
  }
  const std::string script = find_plot_script();
  if (script.empty()) return 2;

  // Options as --name=value and the folders after "--", so that a value or a
  // folder starting with '-' is never read as a flag by argparse.
  std::vector<std::string> args = {kPython, script};
  auto option = [&](const char* name, const std::string& value) {
    if (!value.empty()) args.push_back(std::string(name) + "=" + value);
  };
  option("--metric", f.metric);
  option("--x", f.x);
  option("--out", f.out);
  option("--title", f.title);
  if (f.logy) args.emplace_back("--logy");
  args.emplace_back("--");
  args.insert(args.end(), f.dirs.begin(), f.dirs.end());

  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, kPython, nullptr, nullptr, argv.data(), environ);
  if (err != 0) {
    std::fprintf(stderr, "bitlab: error: cannot start %s: %s\n", kPython, std::strerror(err));
    return 2;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      std::fprintf(stderr, "bitlab: error: waiting for %s: %s\n", kPython, std::strerror(errno));
      return 1;
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace

Subcommand add_plot_command(CLI::App& app) {
  auto f = std::make_shared<PlotFlags>();
  auto* cmd = app.add_subcommand(
      "plot",
      "loss against step, simulated time and bytes sent for runs and sweeps (PNG and SVG), via "
      "notebooks/plot.py and /usr/bin/python3 with python3-matplotlib");
  cmd->footer(
      "A DIR is a run folder, a sweep folder or a folder of run folders. Curves are labelled by "
      "the config values that differ between runs; runs differing only by seed are drawn as "
      "their mean with a min-max band. The script is $BITLAB_NOTEBOOKS/plot.py, else "
      "<bitlab binary's folder>/../notebooks/plot.py.");
  cmd->add_option("dirs", f->dirs, "run folders, sweep folders or folders of runs")
      ->required()
      ->expected(1, -1);
  cmd->add_option("--metric", f->metric,
                  "metrics.csv column on y (default train_loss; e.g. eval_loss, "
                  "train_loss_full, suboptimality)");
  cmd->add_option("--x", f->x,
                  "x axis: step, sim_time_s, bytes_sent_cum, another metrics.csv column, or all "
                  "(default: all; sim_time_s only when the runs have it)");
  cmd->add_option("--out", f->out,
                  "write PREFIX.png and PREFIX.svg (default: FIRST_DIR/plot, or "
                  "FIRST_DIR/plot-METRIC)");
  cmd->add_option("--title", f->title, "figure title");
  cmd->add_flag("--logy", f->logy, "logarithmic y axis");
  return {cmd, [f]() { return run_plot(*f); }};
}

}  // namespace bitlab
