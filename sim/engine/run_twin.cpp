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

// Under MPI only rank 0 reads the twin's folder (the other ranks may not see
// its files): it hands the summary's text to every rank. The simulator: as is.
Json summary_on_every_rank(const RunContext& run, const Json& on_rank0) {
  if (!run.measured) return on_rank0;
  return Json::parse(text_from_rank0(run.transport, run.writer ? on_rank0.dump() : std::string()));
}

// A completed twin of an earlier start of this run (rank 0 reads it), or null.
Json completed_twin(const RunContext& run, const fs::path& dir) {
  Json done;
  std::error_code ec;
  if (run.writer && fs::exists(dir / "summary.json", ec)) {
    done = load_json_file((dir / "summary.json").string());
    if (done.value("status", "") != "completed") done = Json();
  }
  return summary_on_every_rank(run, done);
}

}  // namespace

// Under MPI the twin runs over the same ranks (each its block of workers, as
// the run itself), rank 0 writing <dir>/twin/.
Json run_twin(const RunContext& run) {
  const fs::path dir = fs::path(run.dir) / "twin";
  if (Json done = completed_twin(run, dir); !done.is_null()) return done;
  std::error_code ec;
  if (run.writer) fs::remove_all(dir, ec);
  const Experiment twin = twin_experiment(run.experiment);
  if (!run.options.quiet && run.writer) {
    std::fprintf(stderr, "bitlab: the twin baseline first: %s, into %s\n",
                 twin.optimizer.at("name").get<std::string>().c_str(), dir.c_str());
  }
  RunOptions o;
  o.out_dir = dir.string();
  o.quiet = true;
  o.threads = run.options.threads;
  o.command_line = run.options.command_line + "  # its twin baseline";
  o.print_dir = false;
  o.transport = run.options.transport;
  run_experiment(twin, o);
  return summary_on_every_rank(
      run, run.writer ? load_json_file((dir / "summary.json").string()) : Json());
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
