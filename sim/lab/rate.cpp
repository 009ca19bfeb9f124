// The theory lab (sim/lab/rate.hpp): the grid as one sweep, each run's error
// read back from its metrics.csv, the fit (rate_fit.cpp), rate.json and
// rate.csv, and the table on stdout. docs/rate.md is the user's page.
#include "sim/lab/rate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "problems/problem.hpp"
#include "sim/core/files.hpp"
#include "sim/engine/config.hpp"
#include "sim/lab/sweep.hpp"
#include "sim/lab/sweep_csv.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

// The evaluations a suboptimality run logs in the tail it averages over: at
// least this many (eval_every is set from the smallest T), so that the tail
// mean is not one noisy evaluation.
constexpr int64_t kTailEvaluations = 40;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(text);
  while (std::getline(in, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

// A --vary value as a JSON number (integers stay integers: steps, workers).
Json vary_number(const std::string& text, const std::string& flag) {
  Json v;
  try {
    v = Json::parse(text);
  } catch (const Json::exception&) {
    v = Json();
  }
  if (!v.is_number()) {
    throw ConfigError(flag + ": \"" + text +
                      "\" is not a number (give numbers: steps=100,200,400)");
  }
  if (!(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
    throw ConfigError(flag + ": " + text +
                      " must be > 0 (the fit takes its logarithm: log(error) against log(value))");
  }
  return v;
}

}  // namespace

RateAxis parse_vary(const std::string& text) {
  const std::string flag = "--vary " + text;
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(flag + ": must be path=v1,v2,... (e.g. steps=100,200,400,800)");
  }
  RateAxis axis;
  axis.path = text.substr(0, eq);
  std::set<double> distinct;
  for (const auto& part : split(text.substr(eq + 1), ',')) {
    axis.values.push_back(vary_number(part, flag));
    distinct.insert(axis.values.back().get<double>());
  }
  if (distinct.size() < 3) {
    throw ConfigError(flag + ": needs at least 3 distinct values to fit an exponent (" +
                      std::to_string(distinct.size()) +
                      " given): two points always lie on a line, three test it");
  }
  return axis;
}

namespace {

// The resolved experiment's value at a dotted path, or nullptr.
const Json* value_at(const Json& resolved, const std::string& path) {
  const Json* j = &resolved;
  for (const auto& key : split(path, '.')) {
    if (!j->is_object() || !j->contains(key)) return nullptr;
    j = &(*j)[key];
  }
  return j;
}

void check_options(const Experiment& base, const RateOptions& o) {
  if (o.axes.empty()) {
    throw ConfigError("--vary: give at least one, e.g. --vary steps=100,200,400,800");
  }
  std::set<std::string> seen;
  for (const auto& a : o.axes) {
    const Json* v = value_at(base.resolved, a.path);
    if (!v || !v->is_number()) {
      throw ConfigError("--vary " + a.path + ": the experiment has no numeric setting " + a.path +
                        (v ? " (it is " + show_value(*v) + ")" : std::string()) +
                        "; see bitlab validate FILE --print for its settings");
    }
    if (!seen.insert(a.path).second) {
      throw ConfigError("--vary " + a.path + ": given twice; give each path once");
    }
    if (a.path == "seed") throw ConfigError("--vary seed: seeds are --seeds K, not an axis");
  }
  if (o.seeds < 1) throw ConfigError("--seeds " + std::to_string(o.seeds) + ": must be >= 1");
  if (o.lr_scaling != "none" && !base.optimizer.contains("lr")) {
    throw ConfigError("--lr-scaling " + o.lr_scaling + ": optimizer " +
                      base.optimizer.at("name").get<std::string>() + " has no lr to scale");
  }
  if (!(o.tail > 0 && o.tail <= 1)) {
    throw ConfigError("--tail " + show_value(Json(o.tail)) + ": must be in (0, 1]");
  }
}

// The error measure: suboptimality when the problem logs it (it knows its
// optimum), else the squared norm of the workers' mean gradient.
std::string choose_metric(const Experiment& base, const std::string& asked) {
  const auto* pe = find_entry(problem_registry(), base.problem.at("name").get<std::string>());
  const auto columns = pe->make(base.problem)->eval_columns();
  const bool has_subopt =
      std::find(columns.begin(), columns.end(), "suboptimality") != columns.end();
  if (asked == "auto") return has_subopt ? "suboptimality" : "grad_norm2";
  if (asked == "suboptimality" && !has_subopt) {
    throw ConfigError("--metric suboptimality: problem " +
                      base.problem.at("name").get<std::string>() +
                      " does not know its optimum (it logs no suboptimality); use grad_norm2");
  }
  return asked;
}

// The learning rate of a run with n workers and T steps.
double scaled_lr(const RateOptions& o, double base_lr, double n, double t) {
  double lr = base_lr;
  if (o.lr_scaling == "sqrt_n_over_T") lr = base_lr * std::sqrt(n / t);
  if (o.lr_scaling == "inv_sqrt_T") lr = base_lr / std::sqrt(t);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", lr);  // 6 digits: readable run folders
  return std::stod(buf);
}

// Every point of the grid (first axis slowest), as a zip; the learning rate
// goes with it when it is scaled.
Json grid_as_zip(const Experiment& base, const RateOptions& o) {
  size_t total = 1;
  for (const auto& a : o.axes) total *= a.values.size();
  Json zip = Json::object();
  for (const auto& a : o.axes) zip[a.path] = Json::array();
  if (o.lr_scaling != "none") zip["optimizer.lr"] = Json::array();
  for (size_t p = 0; p < total; ++p) {
    size_t rest = p;
    Json point = base.resolved;
    for (size_t k = o.axes.size(); k-- > 0;) {
      const auto& a = o.axes[k];
      const Json& v = a.values[rest % a.values.size()];
      rest /= a.values.size();
      zip[a.path].push_back(v);
      set_json_path(point, a.path, v);
    }
    if (o.lr_scaling == "none") continue;
    const double lr = point.at("optimizer").at("lr").get<double>();
    const double n = point.at("cluster").at("workers").get<double>();
    zip["optimizer.lr"].push_back(scaled_lr(o, lr, n, point.at("steps").get<double>()));
  }
  return zip;
}

struct RateRun {
  std::vector<double> x;
  int64_t seed = 0;
  std::string status;
  double error = std::numeric_limits<double>::quiet_NaN();
};

// The mean of `metric` over the rows of metrics.csv in the last `tail` of the
// run's steps (NaN when none).
double tail_error(const fs::path& run_dir, const std::string& metric, int64_t steps, double tail) {
  std::ifstream in(run_dir / "metrics.csv");
  std::string line;
  if (!std::getline(in, line)) return std::nan("");
  const auto header = split(line, ',');
  const std::string column = metric == "grad_norm2" ? "grad_norm" : metric;
  const auto at = std::find(header.begin(), header.end(), column) - header.begin();
  if (at == static_cast<long>(header.size())) return std::nan("");
  const double first = static_cast<double>(steps) - std::ceil(tail * static_cast<double>(steps));
  double sum = 0;
  int64_t count = 0;
  while (std::getline(in, line)) {
    const auto cells = split(line, ',');
    if (static_cast<long>(cells.size()) <= at || cells[at].empty()) continue;
    if (std::stod(cells[0]) <= first) continue;
    const double v = std::stod(cells[at]);
    sum += metric == "grad_norm2" ? v * v : v;
    ++count;
  }
  return count ? sum / static_cast<double>(count) : std::nan("");
}

std::vector<RateRun> read_runs(const SweepSpec& spec, const fs::path& dir, const RateOptions& o,
                               const std::string& metric) {
  std::vector<RateRun> runs;
  for (const auto& r : spec.runs) {
    RateRun run;
    for (const auto& [path, value] : r.assignments) {
      if (path == "seed") run.seed = value.get<int64_t>();
    }
    for (const auto& a : o.axes) run.x.push_back(value_at(r.config, a.path)->get<double>());
    const Json summary = read_run_summary(dir / r.dir_name);
    run.status = summary.is_object() ? summary.value("status", "failed") : "failed";
    if (run.status == "completed") {
      run.error = tail_error(dir / r.dir_name, metric, r.config.at("steps").get<int64_t>(), o.tail);
    }
    runs.push_back(run);
  }
  return runs;
}

std::string fmt(double v, const char* f = "%.4g") {
  if (std::isnan(v)) return "";
  char buf[40];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

void write_rate_csv(const SweepSpec& spec, const std::vector<RateRun>& runs, const RateOptions& o,
                    const fs::path& path) {
  std::string csv = "run";
  for (const auto& a : o.axes) csv += "," + a.path;
  csv += ",seed,lr,status,error,dir\n";
  // Cells appended one by one: GCC 12 at -O3 warns (-Wstringop-overflow,
  // -Wrestrict) about `"literal" + std::string&&` (operator+ inserting at
  // the front of the temporary) once inlined here, a known false positive
  // (GCC bugs 105329, 105651); appending says the same without it.
  const auto cell = [&csv](const std::string& text) {
    csv += ',';
    csv += text;
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    csv += std::to_string(spec.runs[i].index);
    for (double x : runs[i].x) cell(fmt(x, "%.10g"));
    cell(std::to_string(runs[i].seed));
    cell(fmt(spec.runs[i].config.at("optimizer").value("lr", std::nan("")), "%.6g"));
    cell(runs[i].status);
    cell(fmt(runs[i].error, "%.8g"));
    cell(spec.runs[i].dir_name);
    csv += '\n';
  }
  write_text_atomic(path.string(), csv);
}

Json describe_fit(const RateFit& fit, const Experiment& base, const RateOptions& o,
                  const std::string& metric) {
  Json j = Json::object();
  j["problem"] = base.problem.at("name");
  j["optimizer"] = base.optimizer.at("name");
  j["metric"] = metric;
  j["tail"] = o.tail;
  j["lr_scaling"] = o.lr_scaling;
  j["seeds_fitted"] = fit.seeds;
  j["interval"] = "95 % Student t-interval of the mean of the per-seed least-squares slopes";
  j["exponents"] = Json::array();
  for (const auto& e : fit.exponents) {
    const auto num = [](double v) { return std::isnan(v) ? Json() : Json(v); };
    j["exponents"].push_back({{"path", e.path},
                              {"exponent", num(e.exponent)},
                              {"ci95", {num(e.ci_low), num(e.ci_high)}},
                              {"exponent_of_mean", num(e.exponent_of_mean)},
                              {"expected", e.expected ? Json(*e.expected) : Json()}});
  }
  const PowerLawCheck& c = fit.check;
  const auto num = [](double v) { return std::isnan(v) ? Json() : Json(v); };
  Json local = Json::object();
  for (size_t k = 0; k < c.local_slopes.size() && k < o.axes.size(); ++k) {
    local[o.axes[k].path] = c.local_slopes[k];
  }
  j["goodness_of_fit"] = {
      {"r2_log_log", num(c.r2)},
      {"lack_of_fit_p", num(c.lack_of_fit_p)},
      {"local_exponents", local},
      {"local_exponent_spread", c.slope_spread},
      {"not_power_law", c.not_power_law},
      {"rule", "not a power law when an axis's local exponents differ by more than " +
                   fmt(kMaxSlopeSpread, "%g") + " and the lack-of-fit F-test against the "
                   "seeds' spread gives p < " + fmt(kLackOfFitAlpha, "%g") +
                   " (with one seed: the spread alone)"}};
  return j;
}

// The goodness-of-fit lines under the table, and the flag.
void print_check(const RateFit& fit, const RateOptions& o) {
  const PowerLawCheck& c = fit.check;
  std::string p_text = "- (one seed: no noise to judge by)";
  if (!std::isnan(c.lack_of_fit_p)) {
    p_text = fmt(c.lack_of_fit_p, "%.2g");  // appended, not chained: see write_rate_csv
    p_text.append(c.lack_of_fit_p < kLackOfFitAlpha
                      ? " (the points are off the line beyond the seeds' spread)"
                      : " (the seeds' spread explains the residuals)");
  }
  std::printf("  fit: R^2 = %s (log-log, seed-mean errors); lack-of-fit p = %s\n",
              fmt(c.r2, "%.4f").c_str(), p_text.c_str());
  for (size_t k = 0; k < c.local_slopes.size() && k < o.axes.size(); ++k) {
    std::string slopes;
    for (double v : c.local_slopes[k]) {
      slopes += ' ';  // appended, not " " + fmt(...): see write_rate_csv
      slopes += fmt(v, "%.3f");
    }
    std::printf("  local exponents in %s (between consecutive values):%s\n",
                o.axes[k].path.c_str(), slopes.c_str());
  }
  if (c.not_power_law) {
    const std::string text =
        "NOT A POWER LAW: the local exponents differ by " + fmt(c.slope_spread, "%.2f") +
        " (> " + fmt(kMaxSlopeSpread, "%g") +
        ") along the range, beyond the seeds' noise: the fitted exponent does not describe "
        "this curve (a floor, a transient or a blow-up?); look at the errors in rate.csv";
    std::printf("  %s\n", text.c_str());
    if (!o.quiet) std::fprintf(stderr, "bitlab rate: warning: %s\n", text.c_str());
  }
}

void print_fit(const RateFit& fit, const Json& j, const fs::path& dir) {
  std::printf("rate: %s on %s, error = %s averaged over the last %s of the steps, lr %s\n",
              j["optimizer"].get<std::string>().c_str(), j["problem"].get<std::string>().c_str(),
              j["metric"].get<std::string>().c_str(),
              (fmt(100 * j["tail"].get<double>(), "%.0f") + " %").c_str(),
              j["lr_scaling"].get<std::string>() == "none"
                  ? "as in the file"
                  : ("scaled " + j["lr_scaling"].get<std::string>()).c_str());
  std::printf("  %-18s %9s  %-22s %12s  %s\n", "axis", "exponent",
              ("95% CI (t, " + std::to_string(fit.seeds) + " seeds)").c_str(), "of the mean",
              "theorem");
  for (const auto& e : fit.exponents) {
    std::string ci = "(one seed: none)";
    if (fit.seeds >= 2) {  // appended, not "[" + fmt(...): see write_rate_csv
      ci = "[";
      ci += fmt(e.ci_low, "%.3f");
      ci += ", ";
      ci += fmt(e.ci_high, "%.3f");
      ci += "]";
    }
    std::printf("  %-18s %9s  %-22s %12s  %s\n", e.path.c_str(), fmt(e.exponent, "%.3f").c_str(),
                ci.c_str(), fmt(e.exponent_of_mean, "%.3f").c_str(),
                e.expected ? fmt(*e.expected, "%.1f").c_str() : "-");
  }
  std::printf("  written: %s, %s\n", (dir / "rate.json").string().c_str(),
              (dir / "rate.csv").string().c_str());
}

// Fits the finished runs; returns false when too few finished to fit.
bool fit_and_report(const SweepSpec& spec, const Experiment& base, const RateOptions& o,
                    const std::string& metric, const fs::path& dir) {
  const auto runs = read_runs(spec, dir, o, metric);
  write_rate_csv(spec, runs, o, dir / "rate.csv");
  std::vector<RateSample> samples;
  std::vector<std::string> paths;
  for (const auto& a : o.axes) paths.push_back(a.path);
  for (const auto& r : runs) {
    if (r.error > 0 && std::isfinite(r.error)) samples.push_back({r.x, r.seed, r.error});
  }
  RateFit fit;
  try {
    fit = fit_rate(paths, samples);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bitlab rate: cannot fit: %s (see %s)\n", e.what(),
                 (dir / "rate.csv").string().c_str());
    return false;
  }
  Json j = describe_fit(fit, base, o, metric);
  write_text_atomic((dir / "rate.json").string(), j.dump(2) + "\n");
  print_fit(fit, j, dir);
  print_check(fit, o);
  return true;
}

}  // namespace

int run_rate(const std::string& file, const RateOptions& o) {
  Json raw = load_experiment_file(file);
  for (const auto& s : o.sets) {
    // As bitlab run: a switch of optimizer keeps the options the new one knows.
    const std::string before = raw_optimizer_name(raw);
    apply_set(raw, s);
    const std::string note = keep_known_optimizer_options(raw, before, "--set " + s);
    if (!note.empty() && !o.quiet) std::fprintf(stderr, "bitlab rate: note: %s\n", note.c_str());
  }
  const std::string stem = fs::path(file).stem().string();
  const Experiment base = resolve_experiment(raw, stem, o.sets);
  check_options(base, o);
  const std::string metric = choose_metric(base, o.metric);
  if (metric == "suboptimality") {
    // Evaluations often enough that the tail mean averages many iterates.
    int64_t t_min = base.run.steps;
    for (const auto& a : o.axes) {
      if (a.path != "steps") continue;
      for (const auto& v : a.values) t_min = std::min(t_min, v.get<int64_t>());
    }
    const auto every = std::max<int64_t>(
        1, static_cast<int64_t>(o.tail * static_cast<double>(t_min)) / kTailEvaluations);
    if (base.run.eval_every == 0 || base.run.eval_every > every) raw["eval_every"] = every;
  }
  Json sweep = {{"name", stem + "-rate"}, {"base", raw}, {"zip", grid_as_zip(base, o)}};
  sweep["seeds"] = Json::array();
  for (int s = 1; s <= o.seeds; ++s) sweep["seeds"].push_back(s);
  const SweepSpec spec = resolve_sweep(sweep, fs::path(file).parent_path().string(), stem);
  SweepOptions so;
  so.out_dir = o.out_dir.empty() ? "results/" + spec.name : o.out_dir;
  so.jobs = o.jobs;
  so.resume = o.resume;
  so.quiet = o.quiet;
  so.binary = o.binary;
  if (!o.quiet) {
    for (const auto& w : spec.warnings)
      std::fprintf(stderr, "bitlab rate: warning: %s\n", w.c_str());
  }
  const int status = run_sweep(spec, so);
  if (status != 0 && status != 3) return status;  // interrupted: nothing to fit
  const bool fitted = fit_and_report(spec, base, o, metric, so.out_dir);
  return fitted ? status : 3;
}

}  // namespace bitlab
