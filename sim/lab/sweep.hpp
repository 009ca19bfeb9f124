// Sweeps: one base experiment, a grid and zipped lists over any config paths,
// and a list of seeds; every run in its own child process (`bitlab run`), up
// to --jobs at once, one results folder per run, and a sweep.csv.
//
// The code: sweep_spec.cpp reads the sweep file and resolves it into runs
// (resolve_sweep, load_sweep); sweep_runner.cpp checks the sweep folder and
// runs the children (run_sweep); sweep_csv.cpp writes sweep.csv and merges
// the shards' csvs (sweep_csv.hpp).
//
// ## The sweep file
//
// JSON; every key but "base" optional, no other key allowed:
//   {"name": "warmup-sweep",
//    "description": "free text",
//    "base": "quickstart.json",
//    "grid": {"optimizer.lr": [0.01, 0.03], "cluster.workers": [8, 16]},
//    "zip":  {"optimizer.name": ["adam", "onebit_adam"],
//             "optimizer.bias_correction": [true, false]},
//    "seeds": [1, 2, 3]}
//   name         names the sweep folder: a non-empty string without '/', not
//                "." or "..". Default: the sweep file's stem.
//   description  a string, copied into sweep.json.
//   base         the experiment every run starts from: an experiment file
//                (a relative path is relative to the sweep file's folder) or
//                an inline experiment object. A run's experiment is named by
//                the base's "name", else the base file's stem, else (inline)
//                the sweep's name.
//   grid         {config path: non-empty list of values}: the cartesian
//                product, first path slowest.
//   zip          {config path: non-empty list of values}: lists of one
//                length, taken in step (tuple k takes the k-th value of each).
//   seeds        a non-empty list of integers >= 0, set as "seed".
// Runs = grid × zip tuples × seeds (fastest), numbered from 1 in that order.
// No grid, zip or seeds: one run of the base. A config path is as for --set:
// "a.b.c", no empty parts; objects on the way are created. Its value is set
// as it is (any JSON value; an object replaces the whole section). A path may
// appear in only one of grid and zip, may not lie inside another swept path
// ("optimizer" and "optimizer.lr"), and may not be "seed" when "seeds" is
// given. At most 100000 runs.
//
// Each run has a label, "optimizer.lr=0.01, seed=2" (strings bare, other
// values as JSON), and a folder name, "run-007_optimizer.lr=0.01_seed=2": the
// index zero-padded to at least 3 digits, then "_path=value" per swept path
// with every character but letters, digits and . _ = - + made '-', cut at
// 120 characters.
//
// Everything is validated before any folder is created: the sweep file
// (`grid.optimizer.lr = 5: must be a non-empty list of values`) and every
// run's resolved experiment (`run 3 (optimizer.lr=-1, seed=2): optimizer.lr =
// -1: must be > 0`), including building its problem, shards and optimizer
// (once per distinct problem, cluster and optimizer: seeds change only the
// draws).
//
// ## The sweep folder (<results_root>/<name>/, or --out)
//
//   sweep.json   the resolved sweep: name, description, base (the raw base
//                experiment), swept (the swept paths, "seed" last) and runs
//                (each run's index, folder and assignments). Written before
//                the first run starts.
//   run-007_optimizer.lr=0.01_seed=2/   the run's folder: run.json (the
//                resolved experiment given to the child), what `bitlab run
//                run.json --out DIR --quiet --threads T` writes there
//                (config.json, manifest.json, metrics.csv, comm_log.csv,
//                summary.json; T = the CPUs this process may use / jobs, at
//                least 1) and stderr.txt (the child's stderr; its stdout is
//                dropped). The child does not inherit an MPI launcher's
//                variables.
//   sweep.csv    one row per finished run, in run order: run, each swept path
//                but seed, seed (the run's seed), status, steps_completed,
//                train_loss, every final eval column (union over the runs),
//                bytes_sent_per_worker, messages_per_worker, sim_time_s (when
//                some run has a network model), wall_s, dir. Values come from
//                the run's summary.json ("" when it left none). Rewritten
//                atomically at the start and after every finished run, so an
//                interrupted sweep keeps a valid csv.
// A folder holding a sweep.json is refused, unless --resume, --shard or
// --merge continues that very sweep (its sweep.json lists the same runs and
// base).
//
// Statuses: completed, diverged or interrupted, as the run's summary.json
// says when the child exited 0, 3 or 130; interrupted when the child was
// killed by SIGINT; failed otherwise (the child exited 1 or 2, was killed by
// another signal, or left no summary; see its stderr.txt).
//
// --resume: runs whose summary.json says completed or diverged keep their
// folders and rows ("finished before, skipped"); the others are run again in
// an emptied folder.
// --shard i/k: only the runs with (index − 1) % k == i, in the shared folder;
// writes sweep.shard-i-of-k.csv instead of sweep.csv. --merge runs nothing:
// it needs every shard's csv of one count k and a row for every run, and
// writes the sweep.csv an unsharded sweep would have written.
//
// On stderr (not with --quiet): a progress line ("[sweep] 3/8 done, 2
// running, 1 diverged, ETA 40s"; redrawn on a terminal, else every
// progress_every_s), then a report listing every run that did not complete.
// On stdout: the sweep folder.
//
// Exit status of run_sweep: 0 every run (of the shard) completed; 3 some run
// did not (it diverged, failed or was interrupted alone; the sweep goes on
// and lists them at the end; --merge likewise); 130 the sweep was interrupted
// (Ctrl-C is forwarded to the children, which end their step; no run starts
// after it; the csv holds what finished). Bad input throws ConfigError (the
// CLI exits 2) before any folder is created.
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
