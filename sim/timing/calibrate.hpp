// Fits the network model (network.hpp) to measured collective times: the
// per-level latency and bandwidth (inside a node, and the node's NIC across
// nodes, shared by its devices), how allreduces run (ring, tree or
// hierarchical: the one that fits best), and a per-collective efficiency where
// the data call for one. `bitlab calibrate` (sim/cli/calibrate_command.cpp)
// reads the measurements and writes the result as a network file
// (network_file.hpp) that `run`, `cost` and `recost` accept. docs/calibrate.md
// explains the method.
//
// The fit prices every measurement with collective_time_s itself, so the model
// that was fitted is exactly the one that prices runs. It minimises the sum of
// squared relative errors (model / measured − 1): a 10 µs message and a 1 s
// one count alike. Parameters are fitted in log space (they stay positive),
// by Levenberg–Marquardt from several starting points. A protocol switch's
// size (a step in latency, network.hpp) is chosen among the measured message
// sizes, the one that fits best, kept only where it lowers the error as an
// efficiency must.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sim/timing/network.hpp"

namespace bitlab {

// One measured collective: `ranks` = nodes × gpus_per_node, `bytes` as
// CommRecord's payload (allreduce: one rank's buffer; allgather and
// reduce-scatter: the total; alltoall: what one rank sends in all; this is
// nccl-tests' "size" column).
struct Measurement {
  std::string collective;  // allreduce | allgather | reduce_scatter | alltoall
  int nodes = 1;
  int gpus_per_node = 1;
  double bytes = 0;
  double time_s = 0;
  std::string origin;  // "FILE:LINE", for messages
  // Rows of the same (collective, nodes, gpus_per_node, bytes) are one point:
  // time_s is their mean, `repeats` their number, and min/max their range
  // (0: one row, time_s).
  int64_t repeats = 1;
  double min_time_s = 0, max_time_s = 0;
};

// The most distinct points a fit takes: its time grows with their number (a
// Levenberg-Marquardt step prices every point a dozen times, and the protocol
// switch is searched over their sizes). nccl-tests' 8 B - 256 MB doubling is
// 26 sizes a collective and node count, so this is ~10 collectives x node
// counts of a full sweep; repeats of a point do not count (they are merged).
inline constexpr size_t kMaxCalibrationPoints = 1000;

// Measurements with repeats merged (mean time; the first row's origin), in
// the order first seen. Memory is bounded by the distinct points, not the
// rows: readers stream their files into one.
class MeasurementSet {
 public:
  // Adds `m` (itself possibly m.repeats rows); throws ConfigError naming
  // `m.origin` and the limit past kMaxCalibrationPoints distinct points.
  void add(const Measurement& m);
  const std::vector<Measurement>& points() const { return points_; }
  // Rows added in all (repeats counted).
  int64_t rows() const { return rows_; }

 private:
  std::map<std::tuple<std::string, int, int, double>, size_t> index_;
  std::vector<Measurement> points_;
  int64_t rows_ = 0;
};

// The fitted quantities, by the name of the network field each fills.
inline constexpr const char* kLinkParameters[] = {"intra_latency_us", "intra_bandwidth_gbps",
                                                  "inter_latency_us", "inter_bandwidth_gbps"};
inline constexpr const char* kEfficiencyParameters[] = {
    "allreduce_efficiency", "allgather_efficiency", "reduce_scatter_efficiency",
    "alltoall_efficiency"};
// The protocol switch of each level (network.hpp): its size, chosen among the
// measured message sizes where a step in the data calls for one (or given
// with --fix; 0: none), and the latency above it, fitted.
inline constexpr const char* kSwitchParameters[] = {
    "intra_rendezvous_bytes", "intra_rendezvous_latency_us", "inter_rendezvous_bytes",
    "inter_rendezvous_latency_us"};

// Past this many points, leave-one-out uses each point's leverage (one
// Gauss-Newton step from the full fit) instead of a refit per point: each
// refit prices every point, so n refits grow as n^2 (286 points took 4 s,
// 4 200 took 10 minutes). Up to it, the refits, as before.
inline constexpr size_t kExactLeaveOneOutPoints = 250;

struct CalibrationOptions {
  // Parameters held at a given value instead of fitted (network field name ->
  // value), e.g. {"intra_latency_us", 5} when every point has one size.
  std::map<std::string, double> fixed;
  // Allreduce algorithms to try ("ring", "tree", "hierarchical"); the best
  // fit wins. One entry: that one is used.
  std::vector<std::string> algorithms = {"ring", "tree", "hierarchical"};
  // An efficiency is kept for a collective only when it moves that
  // collective's RMS relative error down by at least this much (absolute,
  // e.g. 0.05 = 5 percentage points); otherwise it is 1.
  double efficiency_gain = 0.05;
  // Link values for a level the measurements do not cover (`--level-from
  // PRESET`): nothing at nodes = 1 leaves the intra-node pair to it, nothing
  // across nodes the inter-node pair. Empty: such a level is refused.
  std::map<std::string, double> level_from;
  std::string level_from_name;  // the preset's name, for notes
  // Node counts at which tied allreduce algorithms are priced against each
  // other (the scale the user will price); empty: 4x and 16x the largest
  // measured.
  std::vector<int> price_nodes;
  size_t exact_loo_points = kExactLeaveOneOutPoints;
};

struct PointFit {
  Measurement measured;
  double predicted_s = 0;
  double residual = 0;      // predicted / measured − 1
  double loo_residual = 0;  // the same, fitted without this point (NaN: not determinable)
};

struct AlgorithmScore {
  std::string algorithm;
  double rms_residual = 0;
};

struct Calibration {
  // every kLinkParameters, kEfficiencyParameters and kSwitchParameters entry
  std::map<std::string, double> values;
  // per value: "fitted", "fixed", "bound" (at a limit), "default" (not used),
  // or for a switch size "none"
  std::map<std::string, std::string> how;
  std::string allreduce = "ring";
  int gpus_per_node = 1;
  std::vector<PointFit> points;
  std::vector<AlgorithmScore> tried;
  double rms_residual = 0;
  double max_abs_residual = 0;
  double loo_max_abs_residual = 0;  // over points whose refit was determinable
  // "refit" (each point's fit redone without it) or "leverage" (one
  // Gauss-Newton step from the full fit, past kExactLeaveOneOutPoints)
  std::string loo_method = "refit";
  // Allreduce algorithms that fit as well as the chosen one (within
  // kAlgorithmTieRms): the data do not tell them apart.
  std::vector<std::string> tied;
  std::vector<std::string> notes;
};

// Fits; throws ConfigError (exit 2) when the measurements cannot determine a
// parameter that is not fixed (naming it and what would determine it), for an
// empty or inconsistent set (different gpus_per_node), or a bad fixed value.
Calibration calibrate(const std::vector<Measurement>& points, const CalibrationOptions& options);

// The model's time for one measurement under fitted values (the same pricing
// the fit used).
double predicted_time_s(const Measurement& m, const std::map<std::string, double>& values,
                        const std::string& allreduce);

}  // namespace bitlab
