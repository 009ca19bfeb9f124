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
  std::string params, workers, steps, network, network_file, optimizer, step_ms;
  bool json = false;
};

int run_cost(const CostFlags& f) {
  Json raw = f.file.empty() ? Json::object() : load_experiment_file(f.file);
  if (!raw.is_object()) config_fail("", raw, "a cost spec must be a JSON object");
  // An experiment file is priced as it stands, --params/--workers/--steps
  // scaling it up.
  if (raw.contains("problem")) raw = cost_spec_of_experiment(raw);
  std::vector<std::pair<std::string, std::string>> labels;  // assignment, as the user wrote it
  auto flag = [&](const std::string& value, const char* path, const char* name) {
    if (value.empty()) return;
    const std::string assignment = std::string(path) + "=" + value;
    apply_set(raw, assignment);
    labels.emplace_back(assignment, std::string(name) + " " + value);
  };
  flag(f.params, "params", "--params");
  flag(f.workers, "workers", "--workers");
  flag(f.steps, "steps", "--steps");
  // A preset and a network file exclude each other: the one given on the
  // command line replaces the file's.
  if (!f.network.empty() && raw.contains("network") && raw["network"].is_object())
    raw["network"].erase("file");
  if (!f.network_file.empty() && raw.contains("network") && raw["network"].is_object())
    raw["network"].erase("preset");
  flag(f.network, "network.preset", "--network");
  flag(f.network_file, "network.file", "--network-file");
  if (!f.optimizer.empty()) {
    // Another optimizer's options would be unknown keys: a different name
    // starts from that optimizer's defaults (--set adds options).
    const bool same = raw.contains("optimizer") && raw["optimizer"].is_object() &&
                      raw["optimizer"].value("name", "") == f.optimizer;
    if (!same) raw["optimizer"] = Json::object();
    flag(f.optimizer, "optimizer.name", "--optimizer");
  }
  flag(f.step_ms, "compute.step_ms", "--step-ms");
  for (const auto& s : f.sets) {
    apply_set(raw, s);
    labels.emplace_back(s, "--set " + s);
  }
  const CostSpec spec = resolve_cost_spec(raw, labels);
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
      "speed-up against Adam with fp16 and fp32 allreduce");
  cmd->footer(
      "Spec (JSON): {\"params\": 340e6, \"workers\": 64, \"steps\": 10000, "
      "\"samples_per_worker\": 1,\n"
      "  \"network\": {NETWORK options}, \"compute\": {COMPUTE options},\n"
      "  \"optimizer\": {\"name\": ..., options}}  (see `bitlab list`). Applied in order: the "
      "file, the flags, --set.");
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
                  "optimizer name (a name other than the spec's drops the spec's optimizer "
                  "options)");
  cmd->add_option("--step-ms", f->step_ms, "compute time per step and worker, ms");
  cmd->add_flag("--json", f->json, "machine-readable output (the same numbers)");
  return {cmd, [f]() { return run_cost(*f); }};
}

}  // namespace bitlab
