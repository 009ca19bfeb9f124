// Checks that an optimizer's communication plan (Optimizer::comm_plan, through
// plan_communication) equals what a real Simulation logs, step by step and
// phase by phase. Shared by the cost suite's registry walk and the plug-in
// optimizer test.
#pragma once

#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/cost.hpp"

namespace bitlab {

inline std::string record_text(const CommRecord& r) {
  return std::string(r.op) + " " + r.algorithm + " " + r.dtype + " " + r.scope + " p" +
         std::to_string(r.ranks) + " g" + std::to_string(r.groups) + " S" +
         std::to_string(r.payload_bytes) + " sent" + std::to_string(r.sent_bytes) + " m" +
         std::to_string(r.messages);
}

inline bool same_record(const CommRecord& a, const CommRecord& b) {
  return std::strcmp(a.op, b.op) == 0 && std::strcmp(a.algorithm, b.algorithm) == 0 &&
         std::strcmp(a.dtype, b.dtype) == 0 && std::strcmp(a.scope, b.scope) == 0 &&
         a.ranks == b.ranks && a.groups == b.groups && a.payload_bytes == b.payload_bytes &&
         a.sent_bytes == b.sent_bytes && a.messages == b.messages;
}

// Runs `steps` steps of the optimizer on a small quadratic and checks that
// every step logs exactly the plan's records of its phase, and that each
// phase holds the plan's number of steps (`exact_counts`), or at most it.
// `tensors` > 1 splits the quadratic into that many tensors, whose sizes the
// plan is given (the 1-bit family's granularity "tensor").
inline void check_plan_matches_run(const Json& optimizer, int workers, int64_t dim, int64_t steps,
                                   bool exact_counts = true, int64_t tensors = 1) {
  Json problem = {{"name", "quadratic"}, {"dim", dim}};
  if (tensors > 1) problem["tensors"] = tensors;
  const Json raw = {{"steps", steps},
                    {"problem", problem},
                    {"cluster", {{"workers", workers}}},
                    {"optimizer", optimizer}};
  const Experiment e = resolve_experiment(raw, "t");
  Simulation sim(e);
  const std::vector<TensorInfo> sizes = sim.cluster().tensors();
  std::map<std::string, int64_t> counts;
  for (int64_t t = 1; t <= steps; ++t) {
    const size_t before = sim.comm().log().size();
    const StepMetrics& m = sim.step();
    const std::string phase = m.phase;
    ++counts[phase];
    const auto& recs = sim.comm().log().records();
    const std::vector<CommRecord> logged(recs.begin() + static_cast<ptrdiff_t>(before), recs.end());
    const CommPlan plan = plan_communication(e.optimizer, dim, workers, steps, 0, sizes);
    const PhasePlan* p = nullptr;
    for (const auto& q : plan.phases) {
      if (q.name == phase) p = &q;
    }
    INFO("optimizer ", optimizer.dump(), ", step ", t, ", phase ", phase);
    REQUIRE(p != nullptr);
    REQUIRE(logged.size() == p->records.size());
    for (size_t k = 0; k < logged.size(); ++k) {
      INFO("logged  ", record_text(logged[k]));
      INFO("planned ", record_text(p->records[k]));
      CHECK(same_record(logged[k], p->records[k]));
    }
  }
  const CommPlan plan = plan_communication(e.optimizer, dim, workers, steps, 0, sizes);
  int64_t total = 0;
  for (const auto& q : plan.phases) {
    INFO("optimizer ", optimizer.dump(), ", phase ", q.name);
    total += q.steps;
    if (exact_counts) {
      CHECK(counts[q.name] == q.steps);
    } else {
      CHECK(counts[q.name] <= q.steps + (q.name == "compressed" ? steps : 0));
    }
  }
  CHECK(total == steps);
}

}  // namespace bitlab
