// `bitlab recost RUN_DIR [--network PRESET] [--set network.x=v]...
//  [--compute-set x=v]... [--label NAME] [--force] [--json]`
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/core/human.hpp"
#include "sim/lab/recost.hpp"

namespace bitlab {

namespace {

struct RecostCli {
  RecostOptions options;
  std::vector<std::string> compute_sets;
  bool json = false;
};

// A sweep folder: every run re-priced, two columns added to sweep.csv.
int run_recost_sweep(const RecostOptions& o, bool json) {
  const SweepRecost s = recost_sweep(o);
  if (json) {
    Json runs = Json::array();
    for (const auto& [dir, r] : s.runs) {
      runs.push_back({{"run", dir},
                      {"label", r.label},
                      {"comm_s", r.comm_s},
                      {"sim_time_s", r.sim_time_s},
                      {"old_sim_time_s", r.has_old ? Json(r.old_sim_time_s) : Json(nullptr)}});
    }
    std::printf(
        "%s\n",
        Json{{"sweep_dir", o.run_dir}, {"runs", runs}, {"skipped", s.skipped}}.dump(2).c_str());
    return 0;
  }
  for (const auto& [dir, r] : s.runs) {
    std::printf("%-60s simulated time %s (comm %s)%s\n", dir.c_str(),
                human_duration(r.sim_time_s).c_str(), human_duration(r.comm_s).c_str(),
                r.has_old ? ("; own network " + human_duration(r.old_sim_time_s)).c_str() : "");
  }
  for (const auto& why : s.skipped) std::printf("skipped %s\n", why.c_str());
  if (!s.csv_path.empty() && !s.runs.empty()) {
    const std::string& label = s.runs.front().second.label;
    std::printf("%zu runs re-priced; %s comm_s@%s and sim_time_s@%s in %s\n", s.runs.size(),
                s.csv_replaced ? "replaced" : "added", label.c_str(), label.c_str(),
                s.csv_path.c_str());
  }
  return 0;
}

int run_recost(RecostCli& cli) {
  RecostOptions o = cli.options;
  for (const auto& s : cli.compute_sets) o.sets.push_back("compute." + s);
  if (is_sweep_folder(o.run_dir)) return run_recost_sweep(o, cli.json);
  const RecostResult r = recost_run(o);
  const Topology& t = r.topology;
  const double ratio = r.has_old && r.old_sim_time_s > 0 ? r.sim_time_s / r.old_sim_time_s : 0.0;
  if (cli.json) {
    Json j = {{"run_dir", o.run_dir},
              {"label", r.label},
              {"columns", recost_columns(r.label)},
              {"replaced", r.replaced},
              {"network", t.name},
              {"nodes", t.nodes},
              {"gpus_per_node", t.gpus_per_node},
              {"steps", r.steps},
              {"collectives", r.collectives},
              {"compute_s", r.compute_s},
              {"comm_s", r.comm_s},
              {"sim_time_s", r.sim_time_s}};
    if (r.has_old) {
      j["old_network"] = r.old_network;
      j["old_sim_time_s"] = r.old_sim_time_s;
      j["ratio"] = ratio;
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: %lld steps, %lld collectives re-priced under %s (%d node%s x %d GPU%s)\n",
              o.run_dir.c_str(), static_cast<long long>(r.steps),
              static_cast<long long>(r.collectives), t.name.c_str(), t.nodes,
              t.nodes == 1 ? "" : "s", t.gpus_per_node, t.gpus_per_node == 1 ? "" : "s");
  std::printf("  simulated time %s (compute %s, exposed communication %s)\n",
              human_duration(r.sim_time_s).c_str(), human_duration(r.compute_s).c_str(),
              human_duration(r.comm_s).c_str());
  if (r.has_old) {
    std::printf("  the run's own network (%s): %s; new / old = %.4g\n",
                r.old_network.empty() ? "?" : r.old_network.c_str(),
                human_duration(r.old_sim_time_s).c_str(), ratio);
  } else {
    std::printf("  the run has no simulated time of its own to compare with\n");
  }
  std::printf("  %s columns compute_s@%s ... sim_time_s@%s in %s\n",
              r.replaced ? "replaced" : "added", r.label.c_str(), r.label.c_str(),
              r.metrics_path.c_str());
  return 0;
}

}  // namespace

Subcommand add_recost_command(CLI::App& app) {
  auto cli = std::make_shared<RecostCli>();
  auto* sub = app.add_subcommand(
      "recost",
      "re-price a finished run's communication log under another network without re-training; "
      "appends compute_s@LABEL,comm_s@LABEL,step_s@LABEL,sim_time_s@LABEL to its metrics.csv");
  sub->add_option("run_dir", cli->options.run_dir,
                  "results folder of a finished run, or a sweep folder (every run, and "
                  "comm_s@LABEL,sim_time_s@LABEL added to sweep.csv)")
      ->required();
  sub->add_option("--network", cli->options.network,
                  "network preset (see `bitlab list`) or \"custom\", starting from the "
                  "preset's values; default: the run's own network section, overrides included");
  sub->add_option("--network-file", cli->options.network_file,
                  "a network file written by `bitlab calibrate` (instead of a preset)");
  sub->add_option("--set", cli->options.sets,
                  "override network.<field>=value or compute.<field>=value (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)  // `--set a=1 RUN_DIR`: RUN_DIR is not a second value
      ->take_all();
  sub->add_option("--compute-set", cli->compute_sets,
                  "override a compute option: field=value (repeatable; default: the run's own)")
      ->expected(1)
      ->allow_extra_args(false)  // `--set a=1 RUN_DIR`: RUN_DIR is not a second value
      ->take_all();
  sub->add_option("--label", cli->options.label,
                  "suffix of the new columns (default: the preset name)");
  sub->add_flag("--force", cli->options.force, "replace the columns of an existing label");
  sub->add_flag("--json", cli->json, "print the summary as JSON");
  return {sub, [cli] { return run_recost(*cli); }};
}

}  // namespace bitlab
