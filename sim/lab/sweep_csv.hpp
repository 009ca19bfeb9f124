// sweep.csv (sim/lab/sweep.hpp): how each run ended, one row per finished
// run, written by the sweep runner and gathered from the shards by --merge.
// Internal to sim/lab/sweep_*.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "sim/core/schema.hpp"
#include "sim/lab/sweep.hpp"

namespace bitlab {

// How one run ended (or was found at --resume).
struct SweepOutcome {
  bool done = false;     // has a row in sweep.csv
  bool skipped = false;  // finished before this invocation (--resume)
  std::string status;    // completed, diverged, interrupted, failed
  int exit_code = 0;
  Json summary;  // null when the run left none
};

// The run folder's summary.json; null when it is missing or unreadable.
Json read_run_summary(const std::filesystem::path& run_dir);

// A number or string from a summary.json value; "" when absent or null.
std::string summary_cell(const Json& j);

// A summary.json's "warnings" (empty when it has none or is null).
std::vector<std::string> run_warnings(const Json& summary);
// sweep.csv's `warnings` cell: the warnings joined by " | " ("" when none).
std::string joined_warnings(const std::vector<std::string>& warnings);

// The runs' warnings grouped by kind: texts equal but for their numbers are
// one group, each number that differs shown as its range ("29.1–36.4"), with
// the runs that raised any of them; the groups with most runs first (ties in
// first-seen order). `per_run`: (run index, its warnings).
struct WarningGroup {
  std::string text;
  std::vector<int> runs;
};
std::vector<WarningGroup> group_warnings(
    const std::vector<std::pair<int, std::vector<std::string>>>& per_run);

// The csv this invocation writes: sweep.csv, or its shard's csv.
std::string sweep_csv_name(const SweepOptions& options);

// Writes (atomically) the csv at `path`: one row per done outcome.
void write_sweep_csv(const SweepSpec& spec, const std::vector<SweepOutcome>& outcomes,
                     const std::string& path);

// --merge: reads every shard's csv in `dir` and the runs' summaries, writes
// `csv_name`, prints the folder on stdout. Returns 0 when every run completed,
// else 3.
int merge_shard_csvs(const SweepSpec& spec, const std::filesystem::path& dir,
                     const std::string& csv_name);

}  // namespace bitlab
