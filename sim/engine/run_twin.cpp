// The twin baseline (RunSettings::baseline "twin", docs/results.md "A twin
// baseline"): the optimizer's uncompressed twin on the same problem, cluster
// and seed, run first into <dir>/twin/ (kept when a resumed run finds it
// completed); its summary is set beside the run's.

#include "sim/engine/run_parts.hpp"

namespace bitlab::run_parts {

namespace {

double ratio_or_nan(const Json& a, const Json& b) {
  if (!a.is_number() || !b.is_number() || b.get<double>() == 0.0) {
    return std::numeric_limits<double>::quiet_NaN();
  }
  return a.get<double>() / b.get<double>();
}

}  // namespace

Json run_twin(const RunContext& run) {
  const fs::path dir = fs::path(run.dir) / "twin";
  std::error_code ec;
  if (fs::exists(dir / "summary.json", ec)) {
    const Json done = load_json_file((dir / "summary.json").string());
    if (done.value("status", "") == "completed") return done;
  }
  fs::remove_all(dir, ec);
  const Experiment twin = twin_experiment(run.experiment);
  if (!run.options.quiet) {
    std::fprintf(stderr, "bitlab: the twin baseline first: %s, into %s\n",
                 twin.optimizer.at("name").get<std::string>().c_str(), dir.c_str());
  }
  RunCliOptions o;
  o.out_dir = dir.string();
  o.quiet = true;
  o.threads = run.options.threads;
  o.command_line = run.options.command_line + "  # its twin baseline";
  o.print_dir = false;
  run_experiment(twin, o);
  return load_json_file((dir / "summary.json").string());
}

// summary.json's "baseline": the twin's outcome and the run's gaps to it
// (run minus twin; ratios run over twin).
Json twin_comparison(const Json& summary, const Json& twin) {
  Json gaps = Json::object();
  for (const auto& [key, value] : summary["final"].items()) {
    const Json& other = twin["final"].value(key, Json());
    if (key != "eval_step" && value.is_number() && other.is_number()) {
      gaps[key] = value.get<double>() - other.get<double>();
    }
  }
  const Json no_time = Json::object();
  const double time_ratio = ratio_or_nan(summary.value("time", no_time).value("sim_time_s", Json()),
                                         twin.value("time", no_time).value("sim_time_s", Json()));
  return {{"kind", "twin"},
          {"dir", "twin"},
          {"optimizer", twin["optimizer"]},
          {"status", twin["status"]},
          {"final", twin["final"]},
          {"gap", gaps},
          {"bytes_ratio", finite_or_null(ratio_or_nan(summary["totals"]["bytes_sent_per_worker"],
                                                      twin["totals"]["bytes_sent_per_worker"]))},
          {"sim_time_ratio", finite_or_null(time_ratio)},
          {"speedup", finite_or_null(1.0 / time_ratio)}};
}

}  // namespace bitlab::run_parts
