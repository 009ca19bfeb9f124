// The network and time model (docs/algorithms.md §8): prices a step's
// communication log and compute on a cluster of `nodes × gpus_per_node`
// devices. It never knows which optimizer produced the log (docs/design.md: "the
// network never knows which optimizer runs").
//
// Units are in the names: seconds `_s`, microseconds `_us`, bandwidth in
// gigabits per second `_gbps` (10^9 bit/s; GB means 10^9 bytes), bytes `_bytes`.
//
// Hockney (α-β) per message: α + bytes/B. Collective costs, p ranks, S bytes
// (S as in CommRecord: allreduce = one rank's buffer, allgather /
// reduce-scatter = the total gathered, alltoall = what one rank sends in all):
//   allreduce ring           2(p−1)α + 2(p−1)/p · S/B
//   allreduce tree           2⌈log2 p⌉α + 2(p−1)/p · S/B   (halving-doubling)
//   allreduce hierarchical   reduce-scatter inside the node, allreduce across
//                            nodes on S/g per GPU (the g GPUs share the NIC),
//                            allgather inside the node
//   allgather / reduce-scatter ring   (p−1)α + (p−1)/p · S/B
//   alltoall pairwise        (p−1)α + (p−1)/p · S/B (across nodes: the NIC
//                            carries the node's g ranks' off-node traffic)
//   broadcast binomial tree  ⌈log2 p⌉ · (α + S/B)
// A record of scope "inter" with `groups` > 1 (one inter-node group per local
// rank, LoCo's second stage) shares each node's NIC: each group gets B/groups.
// A collective whose ranks span nodes uses the slowest link on its path: a flat
// ring across nodes runs at min(intra, inter) bandwidth with the inter-node
// latency, since every inter-node hop carries the full ring traffic.
//
// The protocol switch (optional, per level; off in every preset): MPI and
// NCCL send small messages eagerly and larger ones after a handshake
// (rendezvous), so above `rendezvous_bytes` a message pays the rendezvous
// latency instead of α. The message size is the collective's bytes per
// round, factor·S / rounds (a ring's S/p; halving-doubling's mean message).
// Without a switch every α is the level's one latency, so a model without
// one prices to the same bits as before the switch existed. `bitlab
// calibrate` fits a switch where the measurements show a step (a 2-rank
// probe of Open MPI's shared memory: about 0.5 µs up to 4 KB, 6 µs above).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct NetworkOptions {
  std::string preset = "none";  // a preset name, "custom", or "none" (no time model)
  int64_t gpus_per_node = 0;    // 0: the preset's
  double intra_latency_us = 0;  // 0: the preset's (custom: must be given)
  double intra_bandwidth_gbps = 0;
  double inter_latency_us = 0;
  double inter_bandwidth_gbps = 0;      // per node (the NIC shared by its GPUs)
  // The protocol switch (above): a message of more than *_rendezvous_bytes
  // pays *_rendezvous_latency_us; 0 and 0: the preset's or file's (none).
  double intra_rendezvous_bytes = 0;
  double intra_rendezvous_latency_us = 0;
  double inter_rendezvous_bytes = 0;
  double inter_rendezvous_latency_us = 0;
  std::string allreduce = "as_logged";  // as_logged | ring | tree | hierarchical
  // Each collective's time is the α-β time / its efficiency (a fitted
  // correction, `bitlab calibrate`); 0: the preset's or file's (1 for presets).
  double allreduce_efficiency = 0;
  double allgather_efficiency = 0;
  double reduce_scatter_efficiency = 0;
  double alltoall_efficiency = 0;
  // A network file written by `bitlab calibrate` (network_file.hpp): it
  // stands in for a preset (its values, overridden by any field given here).
  std::string file;
  // Whether the experiment has a time model: a preset, "custom" or a file.
  bool timed() const { return preset != "none" || !file.empty(); }
  static Schema<NetworkOptions> schema();
};

struct ComputeOptions {
  double step_ms = 0.0;                 // forward + backward + optimizer per step; 0: derived below
  double model_params = 0.0;            // 0: the problem's dimension
  double flops_per_param_sample = 6.0;  // forward + backward ≈ 6 FLOPs per parameter per sample
  double device_tflops = 0.0;           // achieved device throughput; 0 with step_ms 0: no compute
  double memory_bandwidth_gbytes_per_s = 0.0;    // GB/s for compression cost; 0: not modelled
  double overlap = 0.0;           // fraction of backward that can hide an uncompressed allreduce
  double jitter = 0.0;            // relative std. dev. of each worker's compute time
  int64_t straggler_worker = -1;  // -1: none
  double straggler_factor = 1.0;  // that worker's compute time × factor
  // Micro-steps per optimizer step (DeepSpeed's name): a step's batch is
  // computed in this many forward + backward passes (step_ms is one of
  // them), its communication happens once.
  int64_t gradient_accumulation_steps = 1;
  static Schema<ComputeOptions> schema();
};

// Per-collective efficiency: the collective's α-β time is divided by it.
struct CollectiveEfficiency {
  double allreduce = 1, allgather = 1, reduce_scatter = 1, alltoall = 1;
};

// A resolved topology: every number filled in.
struct Topology {
  std::string name;
  int nodes = 1;
  int gpus_per_node = 1;
  double intra_latency_s = 0;
  double intra_bytes_per_s = 0;
  double inter_latency_s = 0;
  double inter_bytes_per_s = 0;  // the node's NIC
  // The protocol switch: 0 bytes = none (every message pays *_latency_s).
  double intra_rendezvous_bytes = 0, intra_rendezvous_latency_s = 0;
  double inter_rendezvous_bytes = 0, inter_rendezvous_latency_s = 0;
  std::string allreduce = "as_logged";
  CollectiveEfficiency efficiency;
  std::string source;  // where the preset's (or network file's) numbers come from
  // A network file fitted by `bitlab calibrate`: the fewest and most nodes its
  // measurements spanned (0 and 0: a preset, custom values, or a file that
  // does not record them). Pricing more nodes than it saw extrapolates.
  int fitted_min_nodes = 0, fitted_max_nodes = 0;
};

struct NetworkPreset {
  std::string name;
  int gpus_per_node;
  double intra_latency_us, intra_bandwidth_gbps;
  double inter_latency_us, inter_bandwidth_gbps;
  std::string source;
  // The protocol switch (network files only; the presets have none).
  double intra_rendezvous_bytes = 0, intra_rendezvous_latency_us = 0;
  double inter_rendezvous_bytes = 0, inter_rendezvous_latency_us = 0;
};
const std::vector<NetworkPreset>& network_presets();

// Builds the topology for `workers` ranks. Throws ConfigError naming
// network.<field> for an unknown preset, a custom topology missing a value,
// or workers not divisible by gpus_per_node (more than one node).
Topology make_topology(const NetworkOptions& options, int64_t workers);

// Time of one logged collective on the topology, in seconds.
double collective_time_s(const CommRecord& r, const Topology& t);

// A collective's time (collective_time_s) split by the link that bounds it:
// inside a node, or across nodes (the NIC). A flat collective across nodes
// counts on the slower of the two bandwidths it runs at (the inter-node
// latency); a hierarchical allreduce splits into its intra-node
// reduce-scatter and all-gather and its inter-node allreduce.
struct LinkTimes {
  double intra_s = 0;
  double inter_s = 0;
};
LinkTimes collective_link_times(const CommRecord& r, const Topology& t);
// How `bitlab cost` names a link: "inside a node: 96 Gbit/s, 5 us" or
// "across nodes: NIC 4.1 Gbit/s per node, 50 us".
std::string link_text(bool inter, const Topology& t);

// algbw = S / t and busbw = algbw · factor (allreduce 2(p−1)/p; allgather,
// reduce-scatter, alltoall (p−1)/p; broadcast 1), in bytes per second.
double bus_factor(const CommRecord& r);

// Bytes a rank must read and write to encode/decode a compressed collective
// (priced at the device memory bandwidth); 0 for uncompressed dtypes.
double compression_bytes_touched(const CommRecord& r);

struct StepTime {
  double compute_s = 0;      // slowest worker's compute
  double compression_s = 0;  // encode/decode, not overlapped
  double comm_s = 0;         // exposed communication (after overlap), compression included
  double step_s = 0;         // compute_s + comm_s
};

// Prices one step: its records, the per-worker compute times (the step waits
// for the slowest) and the overlap of uncompressed allreduces with backward.
StepTime price_step(const std::vector<CommRecord>& records, const Topology& t,
                    const std::vector<double>& worker_compute_s, const ComputeOptions& c);

// Per-worker compute time of a step before jitter/stragglers, in seconds:
// gradient_accumulation_steps × step_ms when step_ms is given, else derived
// from the step's samples (N micro-steps of samples / N each: the same FLOPs).
double base_compute_s(const ComputeOptions& c, double model_params, double samples_per_worker);
// Every worker's compute time at `step`: base × (1 + jitter·N(0,1), floored at 0)
// from RngStream(seed, kJitter, worker, step); the straggler × its factor.
void worker_compute_s(const ComputeOptions& c, double base_s, uint64_t seed, int64_t step,
                      std::vector<double>& out);
// The same with a base per worker (its own batch): out[i] = (the factor above
// for worker i) · base_s[i]. Simulation and `bitlab recost` both price with
// this, so a run re-priced under its own network reproduces its times exactly.
void worker_compute_s(const ComputeOptions& c, const std::vector<double>& base_s, uint64_t seed,
                      int64_t step, std::vector<double>& out);
// Samples a worker's compute is priced for: its batch, at least one (problems
// without data count one sample).
inline double compute_samples(size_t batch_samples) {
  return batch_samples > 0 ? static_cast<double>(batch_samples) : 1.0;
}

}  // namespace bitlab
