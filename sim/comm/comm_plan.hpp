// An optimizer's communication plan: per phase, the CommRecords ONE of its
// steps logs and how many of a run's steps fall in that phase. Optimizers
// state it (Optimizer::comm_plan) from the same closed forms their collectives
// log with (allreduce_record here, each collective's plan()), so `bitlab cost`
// can price a job of any size without training and without knowing any
// optimizer by name; the `cost` test checks every registered optimizer's plan
// against what a real run logs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/core/tensor_layout.hpp"

namespace bitlab {

// What a plan is asked for: d parameters on n workers for `steps` steps.
// Exchanges that depend on the cluster's nodes or the model's tensors (LoCo's
// reference exchange) read `gpus_per_node` (0: every worker on one node) and
// `tensors` (empty: one tensor of `params` elements, its most square 2-D
// shape, as square_tensor describes it).
struct PlanShape {
  int64_t params = 0;
  int workers = 1;
  int64_t steps = 0;
  int gpus_per_node = 0;
  std::vector<TensorInfo> tensors;
};

// One phase: the records of ONE of its steps (step field 0), in log order.
struct PhasePlan {
  std::string name;  // as Optimizer::phase() reports it
  int64_t steps = 0;
  std::vector<CommRecord> records;
};

struct CommPlan {
  std::string optimizer;           // the registry name (set by whoever asks)
  std::vector<PhasePlan> phases;   // every phase the optimizer has, in order; some may have 0 steps
  std::vector<std::string> notes;  // approximations the plan makes
};

}  // namespace bitlab
