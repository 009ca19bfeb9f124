// Reads measured collective times for `bitlab calibrate` (calibrate.hpp):
//
// * nccl-tests' text output (all_reduce_perf, all_gather_perf,
//   reduce_scatter_perf, alltoall_perf; one file may hold several tests one
//   after another). The collective comes from the "# Collective test
//   starting:" line, else the file's name, else `collective`; the ranks and
//   nodes from the "#  Rank N ... on HOST" lines (nodes = distinct hosts), else
//   `nodes` and `gpus_per_node`. The out-of-place time is used. Columns are
//   found by the header's names, units by the units line: a file whose time
//   columns mix units, or that lacks the size or time column, is refused; so
//   is a row whose #wrong is not 0 (a wrong result's timing means nothing).
// * a CSV with the columns collective, nodes, gpus_per_node, bytes, time_ms
//   (any order; other columns are ignored).
// * probe.json, written by `bitlab probe` (format "bitlab-probe-1",
//   docs/calibrate.md): its standard collectives at each level (node: one
//   node of ranks_per_node; world: nodes × ranks_per_node). Its compressed
//   collectives are not fitted (the model prices them from their records); a
//   result whose wrong count is not 0 is refused, as nccl-tests' #wrong.
//
// Every error names the file, the line, the column and the rule (ConfigError,
// exit 2).
#pragma once

#include <string>
#include <vector>

#include "sim/timing/calibrate.hpp"

namespace bitlab {

// The "format" of the file `bitlab probe` writes (and this reader reads).
inline constexpr const char* kProbeFormat = "bitlab-probe-1";

struct MeasurementReadOptions {
  std::string format = "auto";  // auto | nccl-tests | csv | probe (auto: .json or "{" is a probe)
  std::string collective;       // nccl-tests: when the file does not say
  int nodes = 0;                // nccl-tests: when it has no "#  Rank" lines
  int gpus_per_node = 0;
};

std::vector<Measurement> read_measurements(const std::string& path,
                                           const MeasurementReadOptions& options);

// "all_reduce", "allreduce", "all_reduce_perf", ... -> "allreduce"; "" if none.
std::string canonical_collective(const std::string& name);

}  // namespace bitlab
