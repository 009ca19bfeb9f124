// Pieces shared by the optimizers: the `wire` option of an uncompressed
// allreduce, and the one call that averages the workers' gradients.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"
#include "sim/core/tensor_layout.hpp"
#include "sim/kernels/reduce.hpp"  // kParallelMinElements

namespace bitlab {

inline constexpr const char* kWireDoc =
    "element type of the gradient allreduce on the wire: fp32, fp16 or bf16 (each worker's "
    "gradient and the mean are rounded to it; the sum is accumulated in fp32)";

// Adds the `wire` field (std::string Options::wire, default "fp32") to a
// schema. Every options struct that allreduces in full precision has one.
template <class Options>
void add_wire_field(Schema<Options>& s) {
  s.template field<std::string>("wire", &Options::wire, kWireDoc,
                                {rules::one_of({"fp32", "fp16", "bf16"})});
}

// ḡ = mean_i g_i: the exact (up to the wire type) ring allreduce of every
// worker's gradient. The communicator does the arithmetic and counts the
// bytes; this is the only place a baseline optimizer combines gradients.
// Returns the mean to read: `g_mean`, or on a streamed cluster
// (Optimizer::gradient_mean_wire) the cluster's own, folded while the
// gradients were computed with the same arithmetic (no copy); the collective
// is logged all the same.
inline std::span<const float> allreduce_gradients(StepContext& ctx, std::span<float> g_mean,
                                                  WireDtype wire) {
  if (ctx.cluster.streams_mean()) {
    ctx.comm.record(
        allreduce_record(ctx.comm.workers(), static_cast<int64_t>(g_mean.size()), wire, "ring"));
    return ctx.cluster.streamed_mean(wire);
  }
  ctx.comm.allreduce_mean(ctx.cluster.grads(), g_mean, wire, "ring");
  return g_mean;
}

// The record allreduce_gradients logs for d = shape.params.
inline CommRecord gradient_allreduce_record(const PlanShape& shape, WireDtype wire) {
  return allreduce_record(shape.workers, shape.params, wire, "ring");
}

// The plan of an optimizer whose every step is allreduce_gradients: one phase,
// "full".
inline CommPlan full_allreduce_plan(const PlanShape& shape, WireDtype wire) {
  CommPlan plan;
  plan.phases.push_back({"full", shape.steps, {gradient_allreduce_record(shape, wire)}});
  return plan;
}

// The 1-bit family's `granularity` (docs/algorithms.md §1, "Granularity"):
// how the compressed allreduce splits the buffer. bitlab's problems declare
// tensors but no parameter groups, so their one group is the whole model and
// "group" is "flat", bit for bit.
inline constexpr const char* kGranularityDoc =
    "how the 1-bit allreduce splits the buffer: flat (the whole model as one buffer), group "
    "(one buffer per parameter group, the reference's fp16 path, where DeepSpeed's "
    "FP16_Optimizer hands the optimizer one flat master tensor per group; bitlab's problems have "
    "one group, the whole model, so group = flat) or tensor (one per tensor of the problem, the "
    "reference's fp32 path: each its own padding, worker/server errors, scales and four "
    "collectives)";

template <class Options>
void add_granularity_field(Schema<Options>& s, const std::string& default_note) {
  s.field("granularity", &Options::granularity, std::string(kGranularityDoc) + ". " + default_note,
          {rules::one_of({"flat", "group", "tensor"})});
}

// The slices of one compressed call: the whole buffer, or one per tensor.
inline std::vector<OneBitSlice> onebit_slices(const std::string& granularity,
                                              const std::vector<TensorInfo>& tensors, size_t dim) {
  if (granularity != "tensor") return {{0, dim}};
  if (tensors.empty()) {
    config_fail("optimizer.granularity", Json(granularity),
                "needs the problem's tensor layout, and this problem declares no tensors; use "
                "\"group\" (one buffer for the whole model)");
  }
  std::vector<OneBitSlice> out;
  for (const TensorInfo& t : tensors) out.push_back({t.offset, t.size});
  return out;
}

// The slice sizes a plan prices (onebit_slices' sizes): shape.tensors, or one
// tensor of params when it is empty (PlanShape's convention).
inline std::vector<int64_t> onebit_slice_sizes(const std::string& granularity,
                                               const PlanShape& shape) {
  if (granularity != "tensor" || shape.tensors.empty()) return {shape.params};
  std::vector<int64_t> out;
  for (const TensorInfo& t : shape.tensors) out.push_back(static_cast<int64_t>(t.size));
  return out;
}

// The 1-bit allreduce's padding multiple must make every chunk whole bytes (a
// rule only the cluster size decides; checked by setup() and comm_plan()).
inline void check_pad_multiple(int64_t pad_multiple, int workers) {
  const int64_t eight_n = 8 * static_cast<int64_t>(workers);
  if (pad_multiple != 0 && pad_multiple % eight_n != 0) {
    config_fail("optimizer.pad_multiple", Json(pad_multiple),
                "must be 0 (the reference's n·lcm(n, 8) = " +
                    std::to_string(onebit_reference_pad_multiple(workers)) +
                    ") or a multiple of 8·workers = " + std::to_string(eight_n));
  }
}

// The rule on a hierarchical exchange's node size that only the cluster size
// decides (checked by setup() and by comm_plan()).
inline void check_node_size(int64_t node_size, int workers) {
  if (node_size > 0 && workers % node_size != 0) {
    config_fail("optimizer.node_size", Json(node_size),
                "must divide the number of workers (" + std::to_string(workers) + ")");
  }
}

// Saves or loads a phase kept as one of the optimizer's own name literals
// (phase() returns them): loading maps the saved name back to the literal.
inline void phase_state(StateArchive& io, const char*& phase,
                        std::initializer_list<const char*> names) {
  std::string name = phase;
  io.field("phase", name);
  if (!io.loading()) return;
  for (const char* n : names) {
    if (name == n) {
      phase = n;
      return;
    }
  }
  throw ConfigError("checkpoint: unknown phase \"" + name + "\"");
}

// The papers' warm-up share, said by every warm-up warning.
inline constexpr const char* kPaperWarmup =
    "the papers warm up for 15-25 % of training (freeze_step: \"15%\")";

// A warm-up `field` = `warmup` steps under 1 % of a run of `steps` (as a
// default freeze_step of 100 is in a 100 000-step job): "" when it is not.
inline std::string short_warmup_warning(const std::string& field, int64_t warmup, int64_t steps) {
  if (warmup <= 0 || warmup >= steps || static_cast<double>(warmup) * 100.0 >= double(steps)) {
    return "";
  }
  char share[32];
  std::snprintf(share, sizeof share, "%.3g", 100.0 * double(warmup) / double(steps));
  return "optimizer." + field + " = " + std::to_string(warmup) + " is " + share +
         " % of steps = " + std::to_string(steps) +
         ": a warm-up under 1 % of the run freezes a variance estimated over few steps; " +
         kPaperWarmup;
}

// The warnings of a warm-up of `freeze_step` steps in a run of `steps`
// (Optimizer::warnings): as long as the run (`never`: what then happens),
// none at all (0 steps, or 1: `frozen` says what is frozen after that step),
// or under 1 % of the run.
inline std::vector<std::string> warmup_warnings(int64_t freeze_step, int64_t steps,
                                                const std::string& never,
                                                const std::string& frozen) {
  const std::string head = "optimizer.freeze_step = " + std::to_string(freeze_step);
  if (freeze_step >= steps) {
    return {head + " is not below steps = " + std::to_string(steps) + ": " + never};
  }
  if (freeze_step <= 1) {
    const std::string what =
        freeze_step == 0 ? "the variance is frozen before any step has estimated it" : frozen;
    return {head + ": no warm-up, " + what + "; " + kPaperWarmup};
  }
  std::string short_one = short_warmup_warning("freeze_step", freeze_step, steps);
  if (!short_one.empty()) return {std::move(short_one)};
  return {};
}

// The divergence cause of a frozen variance v* (Optimizer::divergence_cause):
// the share of coordinates whose sqrt(v*) lies below eps (in float, as the
// update divides), whose momentum is then divided by about eps. "" when none.
// `since` names when v* was frozen ("step 40").
inline std::string frozen_variance_cause(std::span<const float> v, double eps,
                                         const std::string& since, const std::string& remedy) {
  int64_t below = 0;
  const auto eps_f = static_cast<float>(eps);
  for (const float x : v) below += std::sqrt(x) < eps_f ? 1 : 0;
  if (below == 0) return "";
  const double share = 100.0 * static_cast<double>(below) / static_cast<double>(v.size());
  char text[400];
  std::snprintf(text, sizeof text,
                "%.2g %% of the coordinates (%lld of %zu) had sqrt(v) < eps = %g in the variance "
                "frozen at %s: their momentum is divided by about eps, so a gradient that grows "
                "there explodes; %s",
                share, static_cast<long long>(below), v.size(), eps, since.c_str(),
                remedy.c_str());
  return text;
}

}  // namespace bitlab
