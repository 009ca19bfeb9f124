// `bitlab cost`: price a training job without training it (design.md,
// "Command line"). Given a parameter count d, n workers, a network and a
// compute model, an optimizer with its schedule options and a number of
// steps, it builds the optimizer's communication plan analytically — per
// phase, the CommRecords ONE step logs, from the same closed forms the
// communicator and the compressed collectives use (no buffers of size d, so d
// can be 340 M) — and prices it with the network model (sim/timing/network.hpp),
// against Adam with fp16 and fp32 gradient allreduce on the same cluster.
//
// The plan per optimizer (one step of each phase; S as in CommRecord):
//   adam, sgd, momentum_sgd, lamb ("full"); the warm-up of onebit_adam,
//   apmsqueeze, onebit_lamb ("warmup"); 0/1 Adam's "full" steps:
//       one ring allreduce of S = d·bytes(wire).
//   The 1-bit allreduce (algorithms.md §1) — onebit_adam / apmsqueeze /
//   onebit_lamb "compressed", 0/1 Adam "onebit" and "sync": with
//   D = onebit_padded_dim(d, n, pad_multiple): alltoall bits S = D/8,
//   allgather fp32 scales S = 4n, allgather bits S = D/8, allgather fp32 4n.
//   onebit_adam with compression "none": a ring fp32 allreduce of d.
//   0/1 Adam "local": nothing.
//   loco, node_size 0: QuantizedReduceScatter — alltoall int<b> of
//   n·wire(D/n) and allgather (gather dtype) of n·wire2(D/n), D = d padded to
//   n·group_size; node_size > 0: CompressedAllgatherMean with the n-bit
//   compressor (flat, or intra allgather + inter allgather + intra broadcast).
//   binsgdm: CompressedAllgatherMean with ceil(d/8)-byte bit-vectors.
// Phase step counts over `steps`:
//   onebit_adam, onebit_lamb: warm-up = min(freeze_step, steps).
//   apmsqueeze (switch variance_stable): the switch depends on the gradients,
//     which cost does not have: priced at freeze_step, the switch's upper
//     bound (a note says so); with switch fixed_step it is exact.
//   zero_one_adam: ZeroOneSchedule iterated over the steps (exact).
// tests/test_cost.cpp checks the plan against what a real Simulation logs.
//
// Pricing: per-worker compute = base_compute_s(compute, params,
// samples_per_worker) (compute.step_ms when given), the straggler's × its
// factor; no jitter — cost is an expectation (compute.jitter is ignored, with
// a note). price_step() per phase, × the phase's steps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/core/schema.hpp"
#include "sim/timing/network.hpp"

namespace bitlab {

// The top level of a cost spec (besides "network", "compute", "optimizer").
struct CostSettings {
  std::string description;          // free text
  int64_t params = 0;               // d; required
  int64_t workers = 0;              // n; required
  int64_t steps = 0;                // required
  double samples_per_worker = 1.0;  // per step; only for a compute time derived from FLOPs
  static Schema<CostSettings> schema();
};

struct CostSpec {
  CostSettings settings;
  NetworkOptions network;
  ComputeOptions compute;
  Json optimizer;  // resolved through the optimizer registry
  Json resolved;   // the whole spec, every default filled in
};

// Validates a raw spec: errors `<path> = <value>: <rule>` as ConfigError.
// `labels` pairs each override applied to `raw` ("path=value") with how the
// user wrote it ("--set path=value", "--workers 64"); an error at or under an
// override's path names it.
CostSpec resolve_cost_spec(const Json& raw,
                           const std::vector<std::pair<std::string, std::string>>& labels = {});

// One phase of an optimizer's communication: the records of ONE of its steps
// (step field 0) and how many of the run's steps are in it.
struct PhasePlan {
  std::string name;  // as Optimizer::phase() reports it
  int64_t steps = 0;
  std::vector<CommRecord> records;
};

struct CommPlan {
  std::string optimizer;
  std::vector<PhasePlan> phases;   // every phase the optimizer has, in order; some may have 0 steps
  std::vector<std::string> notes;  // approximations the plan makes
};

// The plan of a resolved optimizer (registry `resolve` output) for d params,
// n workers, `steps` steps. Throws ConfigError naming optimizer.<field> for a
// value that only the cluster size can reject (pad_multiple, node_size), and
// for an optimizer the cost model does not know.
CommPlan plan_communication(const Json& optimizer, int64_t params, int workers, int64_t steps);

struct PhaseCost {
  PhasePlan plan;
  StepTime time;          // one step
  double sent_bytes = 0;  // per worker, one step
  int64_t messages = 0;   // per worker, one step
};

struct JobCost {
  std::string label;
  std::vector<PhaseCost> phases;
  double total_s = 0;
  double total_sent_bytes = 0;  // per worker
  int64_t total_messages = 0;   // per worker
  std::vector<std::string> notes;
};

// Prices every phase: price_step() on its records with `worker_compute_s`.
JobCost price_plan(const CommPlan& plan, const Topology& topology, const ComputeOptions& compute,
                   const std::vector<double>& worker_compute_s, std::string label);

struct CostReport {
  CostSpec spec;
  Topology topology;
  double compute_s = 0;  // base per-worker compute per step
  JobCost job;
  JobCost adam_fp16;  // Adam, fp16 gradient allreduce, same cluster, compute and steps
  JobCost adam_fp32;
  std::vector<std::string> notes;
};

CostReport estimate_cost(const CostSpec& spec);

// The table `bitlab cost` prints, and its --json form (the same numbers).
std::string format_cost_report(const CostReport& report);
Json cost_report_json(const CostReport& report);

}  // namespace bitlab
