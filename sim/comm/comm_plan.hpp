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

namespace bitlab {

// What a plan is asked for: d parameters on n workers for `steps` steps.
struct PlanShape {
  int64_t params = 0;
  int workers = 1;
  int64_t steps = 0;
  // The tensors' sizes in parameter order (they sum to params); empty when
  // unknown (a `bitlab cost` spec without tensor_sizes). Only plans that
  // depend on the layout read it (the 1-bit family's granularity "tensor").
  std::vector<int64_t> tensor_sizes = {};
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
