// Sweeps: one base experiment, a grid and zipped lists over any config path,
// and a list of seeds; every run in its own child process (`bitlab run`),
// up to --jobs at once, one results folder per run and a sweep.csv.
//
// Sweep file (JSON; every key but "base" optional):
//   {"name": "warmup-sweep",            // default: the sweep file's stem
//    "description": "free text",
//    "base": "quickstart.json",          // or an inline experiment object; a
//                                        // path is relative to the sweep file
//    "grid": {"optimizer.lr": [0.01, 0.03], "optimizer.freeze_step": [10, 50]},
//    "zip":  {"optimizer.name": ["adam", "onebit_adam"],
//             "optimizer.bias_correction": [true, false]},
//    "seeds": [1, 2, 3]}
// Runs = cartesian product of the grid lists (first key varies slowest) ×
// the zipped tuples (every zip list has the same length; tuple k takes the
// k-th value of each) × the seeds (fastest). Keys of grid and zip are config
// paths as for --set ("a.b.c"); the values are JSON values set as they are.
// A path may appear in only one of grid and zip, and "seed" not in them when
// "seeds" is given. No grid, zip or seeds: one run of the base.
//
// Everything is validated before any folder is created: the sweep file
// (`grid.optimizer.lr = 5: must be a non-empty list of values`) and every
// run's resolved experiment (`run 3 (optimizer.lr=-1, seed=2): optimizer.lr =
// -1: must be > 0`), including building its problem and shards.
//
// Output folder (results/<name>/ or --out):
//   sweep.json   the resolved sweep: swept paths and every run's assignments
//                and folder (written before the first run starts)
//   run-007_optimizer.lr=0.01_seed=2/   one `bitlab run` results folder per
//                run (plus run.json, the resolved experiment given to the
//                child, and stderr.txt, the child's stderr)
//   sweep.csv    one row per finished run: run, each swept path, seed,
//                status, steps_completed, train_loss, every final eval column
//                (union over runs), bytes_sent_per_worker,
//                messages_per_worker, sim_time_s (when a run has a network
//                model), wall_s, dir. Rewritten atomically after every
//                finished run, so an interrupted sweep keeps a valid csv.
// Statuses: completed, diverged, interrupted, failed (the child exited 1 or
// 2 or was killed; see its stderr.txt).
//
// Exit status of run_sweep: 0 every run completed; 3 some run diverged or
// failed (the sweep goes on; they are listed at the end); 130 interrupted
// (Ctrl-C is forwarded to the children, the csv holds what finished); bad
// input throws ConfigError (the CLI exits 2) before any folder is created.
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
  std::string dir_name;                                   // "run-001_optimizer.lr=0.01_seed=2"
  Json config;                                            // the resolved experiment
};

struct SweepSpec {
  std::string name;
  std::string description;
  Json base;                       // the raw base experiment
  std::vector<std::string> swept;  // swept paths in column order ("seed" last when seeds)
  std::vector<SweepRun> runs;
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
};

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
