// `bitlab recost RUN_DIR --network PRESET`: re-prices a finished run's
// communication log under another network without re-training
// (docs/design.md: "the per-step communication log, so a run can be re-priced
// under another network") and writes the new time columns beside the old.
//
// Inputs, all in RUN_DIR: config.json (the resolved experiment: seed,
// cluster.workers, cluster.batch_size and the run's "network" / "compute"
// sections), comm_log.csv (one row per collective) and metrics.csv (one row
// per step). summary.json's "dim" is read only when the compute time is
// derived from the model size (step_ms 0, device_tflops > 0, model_params 0);
// without it the problem is rebuilt from config.json (so are the shards for
// a full batch).
//
// Every step of metrics.csv is priced with price_step() from that step's
// comm-log records and the per-worker compute times of worker_compute_s()
// times each worker's base_compute_s(), in the run loop's order of operations
// (the same deterministic jitter: RngStream(seed, kJitter, worker, step)), so
// a run re-priced under its own network reproduces its own columns to the
// bit. A step with no records still gets its compute time.
//
// Output: four columns `compute_s@LABEL,comm_s@LABEL,step_s@LABEL,
// sim_time_s@LABEL` appended at the END of every row of metrics.csv, so a
// recost never moves an existing column (wall_s and the run's own time
// columns keep their places; several recosts stack up at the end). With
// `force`, columns of an existing LABEL are rewritten in place. The file is
// written to a temporary name beside it and renamed over the original: a
// reader sees the old file or the new one, never half of one. Both CSVs are
// streamed (memory: one step's records).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "sim/timing/network.hpp"

namespace bitlab {

struct RecostOptions {
  std::string run_dir;
  // A preset name (or "custom"); the network starts from that preset's values.
  // "": the run's own "network" section from config.json.
  std::string network;
  // A network file written by `bitlab calibrate` instead of a preset ("": none).
  std::string network_file;
  // Overrides "network.<field>=value" or "compute.<field>=value" applied on
  // top (the compute section starts from the run's own).
  std::vector<std::string> sets;
  std::string label;   // "": the network's preset name
  bool force = false;  // replace the columns of an existing label
};

struct RecostResult {
  std::string label;
  std::string metrics_path;
  Topology topology;
  ComputeOptions compute;
  int64_t steps = 0;        // rows priced
  int64_t collectives = 0;  // comm-log records priced
  double compute_s = 0;     // Σ of the steps' compute_s under the new network
  double comm_s = 0;        // Σ of the steps' exposed communication
  double sim_time_s = 0;    // Σ step_s (the last row's sim_time_s@LABEL)
  bool replaced = false;    // --force rewrote an existing label's columns
  // The run's own simulated time (its last non-empty sim_time_s), if any.
  bool has_old = false;
  double old_sim_time_s = 0;
  std::string old_network;  // the run's network preset ("" when unknown)
};

// Throws ConfigError for bad options (naming network.<field> / compute.<field>,
// or the --set that caused it), a label that already exists without `force`,
// and a missing or malformed run folder (naming the file, the line and the
// problem). On any error metrics.csv is left untouched.
RecostResult recost_run(const RecostOptions& options);

// `bitlab recost SWEEP_DIR`: re-prices every run of the sweep folder (its
// sweep.json's runs that have results) with the same options, and adds
// comm_s@LABEL and sim_time_s@LABEL (totals) to each row of sweep.csv (with
// `force`, an existing label's columns are rewritten in place). A run that
// has no results yet is listed in `skipped` with the reason; an error in a
// run names it. All or nothing: every run is priced into a temporary file and
// sweep.csv's new text made before any file is replaced, so an error (a bad
// comm_log.csv in the fourth run, a label clash in sweep.csv) leaves every
// file as it was. sweep.csv is rewritten atomically.
struct SweepRecost {
  std::vector<std::pair<std::string, RecostResult>> runs;  // run folder, result
  std::vector<std::string> skipped;
  std::string csv_path;       // "" when the sweep has no sweep.csv yet
  bool csv_replaced = false;  // --force rewrote sweep.csv's columns of the label
};
bool is_sweep_folder(const std::string& dir);
SweepRecost recost_sweep(const RecostOptions& options);

// The names of the four columns a label adds, in order.
std::vector<std::string> recost_columns(const std::string& label);
// Whether `label` may suffix recost's columns (and name a network file, whose
// name is recost's default label): non-empty letters, digits, '_', '-', '.', '+'.
bool recost_label_ok(const std::string& label);

}  // namespace bitlab
