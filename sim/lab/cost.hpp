// `bitlab cost`: price a training job without training it (docs/design.md,
// "Command line"). Given a parameter count d, n workers, a network and a
// compute model, an optimizer with its schedule options and a number of
// steps, it asks the optimizer for its communication plan
// (Optimizer::comm_plan: per phase, the CommRecords ONE step logs and the
// phase's step count, from the closed forms the collectives log with — no
// buffers of size d, so d can be 340 M) and prices it with the network model
// (sim/timing/network.hpp), against the baseline optimizer (baseline_optimizer():
// the uncompressed data-parallel optimizer the papers compare with) with fp16
// and fp32 gradient allreduce on the same cluster. It knows no optimizer by
// name: a new optimizer is priced as soon as it is registered. The `cost`
// test checks every registered optimizer's plan against what a real
// Simulation logs.
//
// Pricing: per-worker compute = base_compute_s(compute, params,
// samples_per_worker) (compute.step_ms when given, × the
// gradient_accumulation_steps micro-steps of an optimizer step), the
// straggler's × its factor; no jitter — cost is an expectation
// (compute.jitter is ignored, with a note). price_step() per phase (one
// exchange per optimizer step), × the phase's steps (optimizer steps).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/comm/comm_plan.hpp"
#include "sim/core/schema.hpp"
#include "sim/lab/zero_plan.hpp"
#include "sim/timing/network.hpp"
#include "sim/timing/zero.hpp"

namespace bitlab {

// The top level of a cost spec (besides "network", "compute", "optimizer").
struct CostSettings {
  std::string description;            // free text
  int64_t params = 0;                 // d; required
  int64_t workers = 0;                // n; required
  int64_t steps = 0;                  // required
  double samples_per_worker = 1.0;    // per step; only for a compute time derived from FLOPs
  std::vector<int64_t> tensor_sizes;  // the model's tensors (sum = params); empty: a stand-in
  std::vector<int64_t> tensor_rows;   // each tensor's first dimension, 0 for 1-D; empty: most square
  double gpu_memory_gb = 0;           // GPU memory (10^9 bytes) the model states must fit; 0: unchecked
  int64_t largest_layer_params = 0;   // ZeRO-3's working buffer; 0: the largest tensor_sizes entry
  static Schema<CostSettings> schema();
};

struct CostSpec {
  CostSettings settings;
  NetworkOptions network;
  ComputeOptions compute;
  Json optimizer;  // resolved through the optimizer registry
  ZeroOptions zero;         // the "zero" section (stage 0 when absent)
  bool zero_given = false;  // the spec has a "zero" section (written back in `resolved`)
  Json resolved;   // the whole spec, every default filled in
  // The overrides applied to the file, as the user wrote them: when there
  // are any, settings.description describes the file, not the priced job.
  std::vector<std::string> overrides;
  // What an override did that the user may not expect (options an optimizer
  // switch dropped), as run's notes.
  std::vector<std::string> notes;
};

// One override of `bitlab cost`: "path=value" and how the user wrote it
// ("--set path=value", "--optimizer onebit_lamb").
struct CostOverride {
  std::string assignment;
  std::string label;
};

// What `bitlab cost` (and bitlab.cost) prices: a raw cost spec or experiment
// (cost_spec_of_experiment), the overrides applied in order as run applies
// --set (apply_override: a switch of optimizer, by --optimizer or --set
// optimizer.name, keeps the options both optimizers know and notes the ones
// dropped), then resolved. Errors name the override that caused them.
CostSpec resolve_cost_request(Json raw, const std::vector<CostOverride>& overrides);

// The cost spec of an experiment (raw, its base chain followed): d from its
// problem, its workers, steps, batch (samples_per_worker), optimizer (raw:
// a warm-up share follows the priced steps), compute and network (left out
// when the experiment has none). Throws ConfigError as `bitlab validate`.
Json cost_spec_of_experiment(const Json& raw_experiment);

// Validates a raw spec: errors `<path> = <value>: <rule>` as ConfigError.
// `labels` pairs each override applied to `raw` ("path=value") with how the
// user wrote it ("--set path=value", "--workers 64"); an error at or under an
// override's path names it.
CostSpec resolve_cost_spec(const Json& raw,
                           const std::vector<std::pair<std::string, std::string>>& labels = {});

// The plan of a resolved optimizer (registry `resolve` output) for d params,
// n workers, `steps` steps: the optimizer's own comm_plan. Throws ConfigError
// naming optimizer.<field> for a value that only the cluster size can reject.
// `gpus_per_node` (the workers of one node; 0: all on one node) and `tensors`
// (the model's layout; empty: one square tensor) are for exchanges that run
// by node or by tensor (PlanShape).
CommPlan plan_communication(const Json& optimizer, int64_t params, int workers, int64_t steps,
                            int gpus_per_node = 0, std::vector<TensorInfo> tensors = {});

// The layout `bitlab cost` prices a model of `params` parameters with: one
// 2-D tensor of the largest multiple of 2·workers (a model's weight matrices,
// which LoCo's reference exchange compresses) and a 1-D remainder (biases and
// norms, which it does not), most square.
std::vector<TensorInfo> cost_tensor_layout(int64_t params, int workers);

// The layout a spec is priced with: its tensor_sizes when given (each
// tensor_rows[p] × size/rows, 1-D for 0, or without tensor_rows its most
// square 2-D shape, as square_tensor), else cost_tensor_layout.
std::vector<TensorInfo> cost_layout(const CostSettings& s);

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

// One ZeRO stage of the job and of the baseline (fp16), for the table of
// every stage `cost` prints; the spec's ZeRO++ options apply at stage 3 only.
struct StageCost {
  int64_t stage = 0;
  bool available = false;  // the optimizer has a partitioned form at this stage
  std::string why_not;
  bool in_deepspeed = true;
  double total_s = 0, baseline_total_s = 0;
  int64_t memory_bytes = 0, baseline_memory_bytes = 0;
};

// The limiting link of a phase: where most of its communication time goes.
struct PhaseLink {
  std::string phase;
  bool inter = false;
  double share = 0;  // of the phase's communication time (before overlap)
  double comm_s = 0;
};

struct CostReport {
  CostSpec spec;
  Topology topology;
  double compute_s = 0;  // base per-worker compute per (optimizer) step, all micro-steps
  JobCost job;
  std::string baseline;   // the baseline optimizer's name (baseline_optimizer())
  JobCost baseline_fp16;  // the baseline, fp16 gradient allreduce, same cluster, compute and steps
  JobCost baseline_fp32;
  // Settings that are legal but likely mistakes for this job (spec.notes,
  // then the optimizer's warnings(steps): a warm-up under 1 % of the steps
  // priced, one as long as the job): printed at the top.
  std::vector<std::string> warnings;
  std::vector<std::string> notes;
  // Memory per GPU (model states) at the spec's ZeRO stage: the optimizer's
  // and the baseline's; the stage table; each phase's limiting link.
  bool in_deepspeed = true;  // false: DeepSpeed refuses this optimizer at this stage
  ZeroMemory memory, baseline_memory;
  std::vector<StageCost> stages;
  std::vector<PhaseLink> links;
};

CostReport estimate_cost(const CostSpec& spec);

// The table `bitlab cost` prints, and its --json form (the same numbers).
std::string format_cost_report(const CostReport& report);
Json cost_report_json(const CostReport& report);

}  // namespace bitlab
