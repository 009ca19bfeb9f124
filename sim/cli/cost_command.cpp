// `bitlab cost [SPEC.json] [flags] [--set path=value]... [--json]`: price a
// training job without training it (sim/lab/cost.hpp). The spec file, then the
// flags, then the --set overrides are applied in that order; every value is
// validated as in the file (errors name the flag or --set that gave it).
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/engine/config.hpp"
#include "sim/lab/cost.hpp"

namespace bitlab {

namespace {

struct CostFlags {
  std::string file;
  std::vector<std::string> sets;
  std::string params, workers, steps, network, network_file, optimizer, step_ms, accumulation;
  std::string zero_stage, gpu_memory_gb;
  bool json = false;
};

// Every required field the spec and the flags leave out, in one message
// (resolve_cost_request names only the first). An experiment file ("problem")
// is priced as it stands: its own checks apply.
void check_cost_fields(const Json& file, const std::vector<CostOverride>& overrides) {
  if (!file.is_object() || file.contains("problem")) return;
  Json probe = file;
  for (const auto& o : overrides) {
    try {
      apply_set(probe, o.assignment);
    } catch (const ConfigError&) {
      // a bad value: resolve_cost_request names it
    }
  }
  const std::pair<const char*, const char*> kRequired[] = {
      {"params", "--params N"},
      {"workers", "--workers N"},
      {"steps", "--steps N"},
      {"network", "--network PRESET or --network-file FILE"},
      {"optimizer", "--optimizer NAME"}};
  std::vector<std::string> missing;
  for (const auto& [key, how] : kRequired) {
    if (!probe.contains(key)) missing.push_back(std::string(key) + " (" + how + ")");
  }
  if (missing.size() < 2) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  throw ConfigError(std::to_string(missing.size()) + " required fields missing: " + list +
                        "; give them in the spec file or as these flags",
                    missing.front().substr(0, missing.front().find(' ')));
}

int run_cost(const CostFlags& f) {
  // The flags, then the --set overrides, in order: each is a path=value
  // applied as run applies --set (resolve_cost_request).
  std::vector<CostOverride> overrides;
  auto flag = [&](const std::string& value, const char* path, const char* name) {
    if (value.empty()) return;
    overrides.push_back({std::string(path) + "=" + value, std::string(name) + " " + value});
  };
  Json file = f.file.empty() ? Json::object() : load_experiment_file(f.file);
  // A preset and a network file exclude each other: the one given on the
  // command line replaces the experiment file's.
  if (file.contains("network") && file["network"].is_object()) {
    if (!f.network.empty()) file["network"].erase("file");
    if (!f.network_file.empty()) file["network"].erase("preset");
  }
  flag(f.params, "params", "--params");
  flag(f.workers, "workers", "--workers");
  flag(f.steps, "steps", "--steps");
  flag(f.network, "network.preset", "--network");
  flag(f.network_file, "network.file", "--network-file");
  flag(f.optimizer, "optimizer.name", "--optimizer");
  flag(f.step_ms, "compute.step_ms", "--step-ms");
  flag(f.accumulation, "compute.gradient_accumulation_steps", "--gradient-accumulation-steps");
  flag(f.zero_stage, "zero.stage", "--zero-stage");
  flag(f.gpu_memory_gb, "gpu_memory_gb", "--gpu-memory-gb");
  for (const auto& s : f.sets) overrides.push_back({s, "--set " + s});
  check_cost_fields(file, overrides);
  const CostSpec spec = resolve_cost_request(std::move(file), overrides);
  const CostReport report = estimate_cost(spec);
  if (f.json) {
    std::printf("%s\n", cost_report_json(report).dump(2).c_str());
  } else {
    std::fputs(format_cost_report(report).c_str(), stdout);
  }
  return 0;
}

}  // namespace

Subcommand add_cost_command(CLI::App& app) {
  auto f = std::make_shared<CostFlags>();
  auto* cmd = app.add_subcommand(
      "cost",
      "price a training job without training it: per-phase step time, total time and volume, "
      "speed-up against Adam with fp16 and fp32 allreduce, memory per GPU at each ZeRO stage");
  cmd->footer(
      "Spec (JSON): {\"params\": 340e6, \"workers\": 64, \"steps\": 10000, "
      "\"samples_per_worker\": 1,\n"
      "  \"network\": {NETWORK options}, \"compute\": {COMPUTE options},\n"
      "  \"optimizer\": {\"name\": ..., options}, optional \"zero\": {\"stage\": 0-3, ...}}  "
      "(see `bitlab list`). Applied in order: the "
      "file, the flags, --set; with any, the file's description is shown as the file's.");
  cmd->add_option("spec", f->file,
                  "cost spec JSON file, or an experiment file (priced as it stands: d from its "
                  "problem, its workers, steps, optimizer and network); optional when the flags "
                  "say it all");
  cmd->add_option("--set", f->sets,
                  "override a spec value: path=value (e.g. optimizer.freeze_step=1500)")
      ->take_all();
  cmd->add_option("--params", f->params, "parameters d (e.g. 340e6)");
  cmd->add_option("--workers", f->workers, "data-parallel workers n");
  cmd->add_option("--steps", f->steps, "training steps");
  cmd->add_option("--network", f->network, "network preset (or custom, with --set network.*)");
  cmd->add_option("--network-file", f->network_file,
                  "a network file written by `bitlab calibrate` (instead of a preset)");
  cmd->add_option("--optimizer", f->optimizer,
                  "optimizer name (as --set optimizer.name: the options both optimizers know "
                  "are kept, the others dropped with a warning)");
  cmd->add_option("--step-ms", f->step_ms,
                  "compute time per step and worker, ms (per micro-step with gradient "
                  "accumulation)");
  cmd->add_option("--gradient-accumulation-steps", f->accumulation,
                  "micro-steps per optimizer step (compute.gradient_accumulation_steps): each "
                  "step computes N micro-steps and communicates once; --steps counts optimizer "
                  "steps");
  cmd->add_option("--zero-stage", f->zero_stage,
                  "ZeRO stage 0-3 (zero.stage; the other zero.* fields by --set, DeepSpeed's "
                  "names: reduce_bucket_size, allgather_bucket_size, overlap_comm, "
                  "zero_quantized_weights, zero_hpz_partition_size, zero_quantized_gradients)");
  cmd->add_option("--gpu-memory-gb", f->gpu_memory_gb,
                  "each GPU's memory in GB (10^9 bytes): cost says whether the model states fit");
  cmd->add_flag("--json", f->json, "machine-readable output (the same numbers)");
  return {cmd, [f]() { return run_cost(*f); }};
}

}  // namespace bitlab
