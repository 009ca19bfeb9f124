// `bitlab calibrate FILE... [--fix FIELD=VALUE] [--allreduce ALGO] [--out network.json]`:
// fits the network model to measured collective times (nccl-tests output, a
// CSV or bitlab probe's probe.json; sim/lab/measurements.hpp) and writes a network file that `run`, `cost`
// and `recost` take in place of a preset (docs/calibrate.md; the fit:
// sim/timing/calibrate.hpp).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "sim/cli/commands.hpp"
#include "sim/core/files.hpp"
#include "sim/lab/measurements.hpp"
#include "sim/lab/recost.hpp"
#include "sim/timing/calibrate.hpp"
#include "sim/timing/network_file.hpp"

namespace bitlab {

namespace {

struct CalibrateFlags {
  std::vector<std::string> files;
  MeasurementReadOptions read;
  std::vector<std::string> fixes;
  std::string allreduce = "auto";
  std::string level_from;        // a preset for the levels the data do not cover
  std::vector<int> price_nodes;  // where tied algorithms are priced against each other
  std::string name;
  std::string out = "network.json";
  bool force = false;
  bool json = false;
};

// Past these the fit is called poor on the page (a warning, not an error: a
// poor fit is reported, never hidden). 15 % and 25 % are the bounds the
// validation of a fit asks of it and of its leave-one-out (docs/calibrate.md).
constexpr double kPoorResidual = 0.15;
constexpr double kPoorLeaveOneOut = 0.25;

CalibrationOptions calibration_options(const CalibrateFlags& f) {
  CalibrationOptions o;
  for (const auto& fix : f.fixes) {
    const auto eq = fix.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("--fix " + fix + ": must be FIELD=VALUE, e.g. intra_latency_us=5", "--fix");
    const std::string value = fix.substr(eq + 1);
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || value.empty())
      throw ConfigError("--fix " + fix + ": " + value + " is not a number", "--fix");
    o.fixed[fix.substr(0, eq)] = v;
  }
  if (f.allreduce != "auto") o.algorithms = {f.allreduce};
  if (!f.level_from.empty()) {
    std::vector<std::string> names;
    for (const auto& p : network_presets()) {
      names.push_back(p.name);
      if (p.name != f.level_from) continue;
      o.level_from = {{"intra_latency_us", p.intra_latency_us},
                      {"intra_bandwidth_gbps", p.intra_bandwidth_gbps},
                      {"inter_latency_us", p.inter_latency_us},
                      {"inter_bandwidth_gbps", p.inter_bandwidth_gbps}};
      o.level_from_name = p.name;
    }
    if (o.level_from.empty())
      throw ConfigError("--level-from " + f.level_from + ": " + one_of_message(f.level_from, names),
                        "--level-from");
  }
  for (int n : f.price_nodes)
    if (n < 1 || n > 1000000)
      throw ConfigError("--price-nodes " + std::to_string(n) + ": must be a node count from 1 to 10^6",
                        "--price-nodes");
  o.price_nodes = f.price_nodes;
  return o;
}

std::string percent(double r) {
  if (std::isnan(r)) return "n/a";
  char b[32];
  std::snprintf(b, sizeof b, "%+.1f %%", 100 * r);
  return b;
}

void print_fit(const Calibration& c, size_t files) {
  std::printf("bitlab calibrate: %zu measurements from %zu file(s); allreduce modelled as %s\n",
              c.points.size(), files, c.allreduce.c_str());
  const bool switched = c.how.at("intra_rendezvous_bytes") == "fitted" ||
                        c.how.at("inter_rendezvous_bytes") == "fitted";
  for (const auto& t : c.tried)
    std::printf("  %-13s rms error %.1f %%%s\n", t.algorithm.c_str(), 100 * t.rms_residual,
                t.algorithm != c.allreduce ? ""
                : switched                 ? "  (chosen; before the protocol switch below)"
                                           : "  (chosen)");
  for (const char* name : kLinkParameters)
    std::printf("  %-22s %12.4g  (%s)\n", name, c.values.at(name), c.how.at(name).c_str());
  for (const char* name : kEfficiencyParameters)
    if (c.how.at(name) != "default")
      std::printf("  %-22s %12.4g  (%s)\n", name, c.values.at(name), c.how.at(name).c_str());
  for (size_t k = 0; k < std::size(kSwitchParameters); k += 2) {
    const char* bytes = kSwitchParameters[k];
    const char* latency = kSwitchParameters[k + 1];
    if (!(c.values.at(bytes) > 0)) continue;
    std::printf("  %-22s %12.4g  (%s: messages above it pay the next latency)\n", bytes,
                c.values.at(bytes), c.how.at(bytes).c_str());
    std::printf("  %-22s %12.4g  (%s)\n", latency, c.values.at(latency), c.how.at(latency).c_str());
  }
  std::printf("\n  %-14s %5s %4s %14s %12s %12s %9s %14s\n", "collective", "nodes", "gpus",
              "bytes", "measured_ms", "model_ms", "residual", "leave-one-out");
  for (const auto& p : c.points) {
    std::printf("  %-14s %5d %4d %14.0f %12.4g %12.4g %9s %14s\n", p.measured.collective.c_str(),
                p.measured.nodes, p.measured.gpus_per_node, p.measured.bytes,
                1e3 * p.measured.time_s, 1e3 * p.predicted_s, percent(p.residual).c_str(),
                percent(p.loo_residual).c_str());
  }
  std::printf("\n  rms %.1f %%, worst %.1f %%, leave-one-out worst %.1f %%%s\n",
              100 * c.rms_residual, 100 * c.max_abs_residual, 100 * c.loo_max_abs_residual,
              c.loo_method == "leverage"
                  ? " (leave-one-out from each point's leverage, one Gauss-Newton step from the "
                    "full fit: too many points to refit each)"
                  : "");
  for (const auto& n : c.notes) std::printf("  note: %s\n", n.c_str());
  if (c.max_abs_residual > kPoorResidual || c.loo_max_abs_residual > kPoorLeaveOneOut) {
    std::printf("  warning: a poor fit (worst point %.1f %%, leave-one-out %.1f %%; a good one "
                "stays within %.0f %% and %.0f %%): the model does not describe these "
                "measurements well, so trust its prices accordingly\n",
                100 * c.max_abs_residual, 100 * c.loo_max_abs_residual, 100 * kPoorResidual,
                100 * kPoorLeaveOneOut);
  }
}

Json fit_report(const Calibration& c, const std::vector<std::string>& files) {
  Json fit;
  fit["files"] = files;
  fit["allreduce_tried"] = Json::object();
  for (const auto& t : c.tried) fit["allreduce_tried"][t.algorithm] = t.rms_residual;
  fit["how"] = c.how;
  fit["rms_residual"] = c.rms_residual;
  fit["max_abs_residual"] = c.max_abs_residual;
  fit["loo_max_abs_residual"] = c.loo_max_abs_residual;
  fit["loo_method"] = c.loo_method;
  if (!c.tied.empty()) fit["allreduce_tied"] = c.tied;
  fit["notes"] = c.notes;
  Json points = Json::array();
  for (const auto& p : c.points) {
    points.push_back({{"collective", p.measured.collective},
                      {"nodes", p.measured.nodes},
                      {"gpus_per_node", p.measured.gpus_per_node},
                      {"bytes", p.measured.bytes},
                      {"measured_s", p.measured.time_s},
                      {"model_s", p.predicted_s},
                      {"residual", p.residual},
                      {"loo_residual", std::isnan(p.loo_residual) ? Json() : Json(p.loo_residual)},
                      {"repeats", p.measured.repeats},
                      {"origin", p.measured.origin}});
  }
  fit["points"] = points;
  return fit;
}

NetworkFile network_of(const Calibration& c, const std::string& name, const std::string& source) {
  NetworkFile f;
  f.links.name = name;
  f.links.source = source;
  f.links.gpus_per_node = c.gpus_per_node;
  f.links.intra_latency_us = c.values.at("intra_latency_us");
  f.links.intra_bandwidth_gbps = c.values.at("intra_bandwidth_gbps");
  f.links.inter_latency_us = c.values.at("inter_latency_us");
  f.links.inter_bandwidth_gbps = c.values.at("inter_bandwidth_gbps");
  if (c.values.at("intra_rendezvous_bytes") > 0) {
    f.links.intra_rendezvous_bytes = c.values.at("intra_rendezvous_bytes");
    f.links.intra_rendezvous_latency_us = c.values.at("intra_rendezvous_latency_us");
  }
  if (c.values.at("inter_rendezvous_bytes") > 0) {
    f.links.inter_rendezvous_bytes = c.values.at("inter_rendezvous_bytes");
    f.links.inter_rendezvous_latency_us = c.values.at("inter_rendezvous_latency_us");
  }
  f.allreduce = c.allreduce;
  f.efficiency = {c.values.at("allreduce_efficiency"), c.values.at("allgather_efficiency"),
                  c.values.at("reduce_scatter_efficiency"), c.values.at("alltoall_efficiency")};
  return f;
}

int run_calibrate(const CalibrateFlags& f) {
  const std::string name =
      f.name.empty() ? std::filesystem::path(f.out).stem().string() : f.name;
  if (!recost_label_ok(name))
    throw ConfigError("--name " + name + ": must be non-empty and use only letters, digits, '_', "
                      "'-', '.' and '+' (it labels recost's columns)", "--name");
  if (std::filesystem::exists(f.out) && !f.force)
    throw ConfigError("--out " + f.out + ": exists; give --force to replace it", "--out");
  std::vector<Measurement> points;
  for (const auto& file : f.files) {
    auto more = read_measurements(file, f.read);
    points.insert(points.end(), more.begin(), more.end());
  }
  const Calibration c = calibrate(points, calibration_options(f));
  std::string source = "bitlab calibrate on";
  for (const auto& file : f.files) source += " " + std::filesystem::path(file).filename().string();
  const Json file_json = network_file_json(network_of(c, name, source), fit_report(c, f.files));
  if (f.json) {
    std::printf("%s\n", file_json.dump(2).c_str());
  } else {
    print_fit(c, f.files.size());
  }
  write_text_atomic(f.out, file_json.dump(2) + "\n");
  std::fprintf(stderr, "wrote %s: use it with `bitlab cost --network-file %s ...`, `bitlab recost "
               "RUN --network-file %s`, or \"network\": {\"file\": \"%s\"} in an experiment\n",
               f.out.c_str(), f.out.c_str(), f.out.c_str(), f.out.c_str());
  return 0;
}

}  // namespace

Subcommand add_calibrate_command(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  auto* cmd = app.add_subcommand(
      "calibrate",
      "fit the network model (per-level latency and bandwidth, the allreduce algorithm, "
      "per-collective efficiencies, a protocol switch where the data show one) to measured collective times and write a network file");
  cmd->footer(
      "Input: nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf, "
      "alltoall_perf), a CSV with columns collective,nodes,gpus_per_node,bytes,time_ms, or "
      "the probe.json of `bitlab probe`.\n"
      "Exit status: 0 fitted and written; 2 bad input or a parameter the data cannot "
      "determine (nothing written). docs/calibrate.md.");
  cmd->add_option("files", f->files, "measurement files")->required();
  cmd->add_option("--format", f->read.format, "auto (default: .json is a probe), nccl-tests, csv or probe");
  cmd->add_option("--collective", f->read.collective,
                  "nccl-tests: the collective, when neither the file nor its name says");
  cmd->add_option("--nodes", f->read.nodes, "nccl-tests: nodes, when no \"#  Rank\" lines say");
  cmd->add_option("--gpus-per-node", f->read.gpus_per_node, "nccl-tests: ranks per node, likewise");
  cmd->add_option("--fix", f->fixes,
                  "hold a parameter at a value instead of fitting it: FIELD=VALUE with FIELD one "
                  "of intra_latency_us, intra_bandwidth_gbps, inter_latency_us, "
                  "inter_bandwidth_gbps, *_efficiency, intra_/inter_rendezvous_bytes (0: no "
                  "protocol switch), intra_/inter_rendezvous_latency_us (repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--allreduce", f->allreduce,
                  "auto (the best fit of ring, tree, hierarchical; of those that fit alike, the "
                  "first; default) or one of them")
      ->check(CLI::IsMember({"auto", "ring", "tree", "hierarchical"}));
  cmd->add_option("--level-from", f->level_from,
                  "a preset network (as network.preset names them) whose links stand in for a "
                  "level no measurement covers: inside a node when nothing ran on one node, "
                  "across nodes when nothing spanned nodes; the rest is fitted");
  cmd->add_option("--price-nodes", f->price_nodes,
                  "node counts at which allreduce algorithms that fit alike are priced against "
                  "each other (default: 4x and 16x the largest measured; repeatable)")
      ->expected(1)
      ->allow_extra_args(false)
      ->take_all();
  cmd->add_option("--name", f->name, "the network's name (default: --out's stem)");
  cmd->add_option("--out", f->out, "the network file to write (default network.json)");
  cmd->add_flag("--force", f->force, "replace an existing --out");
  cmd->add_flag("--json", f->json, "print the network file instead of the table");
  return {cmd, [f] { return run_calibrate(*f); }};
}

}  // namespace bitlab
