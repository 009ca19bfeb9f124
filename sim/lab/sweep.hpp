// Sweeps: one base experiment, a grid and zipped lists over any config paths,
// and a list of seeds; every run in its own child process (`bitlab run`), up
// to --jobs at once, one results folder per run, and a sweep.csv.
//
// The code: sweep_spec.cpp reads the sweep file and resolves it into runs
// (resolve_sweep, load_sweep); sweep_runner.cpp checks the sweep folder and
// runs the children (run_sweep); sweep_csv.cpp writes sweep.csv and merges
// the shards' csvs (sweep_csv.hpp).
//
// The sweep file, the sweep folder (sweep.json, the run folders, sweep.csv),
// statuses, --resume, --shard/--merge and exit statuses are documented for
// users in docs/sweeps.md; this code implements that page.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

struct SweepRun {
  int index = 0;                                          // 1-based
  std::vector<std::pair<std::string, Json>> assignments;  // path, value (grid, zip, seed)
  std::string label;                                      // "optimizer.lr=0.01, seed=2"
  // Each assignment's value as sweep.csv shows it: a swept object by what
  // differs across the sweep ("onebit_adam freeze_step=40"), not a JSON blob.
  std::vector<std::string> value_texts;
  std::string dir_name;  // "run-001_optimizer.lr=0.01_seed=2"
  Json config;           // the resolved experiment
};

struct SweepSpec {
  std::string name;
  std::string description;
  Json base;                       // the raw base experiment
  std::vector<std::string> swept;  // swept paths in column order ("seed" last when seeds)
  std::vector<SweepRun> runs;
  // Said once before running and kept in sweep.json: optimizers compared with
  // different shared hyperparameters, options dropped by an optimizer switch.
  std::vector<std::string> warnings;
};

// Validates a sweep (raw JSON) and resolves every run. `base_dir` is where a
// base path is looked up; `default_name` names a sweep without "name".
// `check_runs`: also build each distinct run's problem and shards.
SweepSpec resolve_sweep(const Json& raw, const std::string& base_dir,
                        const std::string& default_name, bool check_runs = true);
// Loads and resolves a sweep file.
SweepSpec load_sweep(const std::string& file);

// `value` rendered for labels, folder names and csv cells (strings bare).
std::string sweep_value_text(const Json& value);

struct SweepOptions {
  std::string out_dir;  // "" : <results_root>/<name>
  std::string results_root = "results";
  int jobs = 0;                           // 0: the machine's cores
  int threads = 0;                        // each run's; 0: the cores divided among the jobs
  bool resume = false;                    // skip completed/diverged runs, re-run the others
  bool quiet = false;                     // no progress or summary on stderr
  std::string binary = "/proc/self/exe";  // the bitlab executable the children run
  double progress_every_s = 5.0;          // progress line period when stderr is not a tty
  // --shard i/k (0-based i < k): run only the runs with (index − 1) % k == i,
  // in the same sweep folder as the other shards (e.g. one cluster array task
  // each, on a shared file system), and write sweep.shard-i-of-k.csv instead
  // of sweep.csv. shards = 0: the whole sweep.
  int shard = 0;
  int shards = 0;
  // --merge: run nothing; read every shard's csv and the runs' summaries and
  // write the sweep.csv an unsharded sweep would have written.
  bool merge = false;
  // Each run writes a checkpoint every k steps (bitlab run --checkpoint-every);
  // --resume then continues a half-finished run from its checkpoint instead
  // of starting it again. 0: no checkpoints.
  int64_t checkpoint_every = 0;
};

// --dry-run: the runs (their folders) and, for each, the settings of its
// resolved experiment that differ between the runs (a setting another run
// lacks included), then the sweep's warnings; the folder it would write.
std::string sweep_plan_text(const SweepSpec& spec, const SweepOptions& options);

// Parses "i/k" (0 <= i < k). Throws ConfigError naming --shard otherwise.
std::pair<int, int> parse_shard(const std::string& text);
// The csv of shard i of k: "sweep.shard-<i>-of-<k>.csv".
std::string shard_csv_name(int shard, int shards);

// Runs the sweep (or its shard, or merges the shards). Returns 0 / 3 / 130
// (see above); prints the sweep folder on stdout. Throws ConfigError when the
// output folder already holds a sweep (without resume or a shard) or holds a
// different sweep (with resume or a shard), and for --merge when a shard's csv
// is missing or lists no row for some run.
int run_sweep(const SweepSpec& spec, const SweepOptions& options);

}  // namespace bitlab
