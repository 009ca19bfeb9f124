// Sweep files (sim/lab/sweep.hpp): reading and validating a sweep file, and
// resolving it into runs, each a complete experiment checked before any
// folder exists.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/core/memory.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/sweep.hpp"

namespace bitlab {

namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kSweepKeys = {"name", "description", "base", "grid", "zip", "seeds"};

// A {path: [values...]} section, in the file's order.
using ValueLists = std::vector<std::pair<std::string, std::vector<Json>>>;

// What varies from run to run. Runs = grid (first path slowest) × zip
// tuples × seeds (fastest).
struct SweepAxes {
  ValueLists grid;
  ValueLists zip;  // all lists of one length; tuple k takes the k-th value of each
  size_t zip_len = 1;
  std::vector<Json> seeds;

  // Saturates instead of wrapping: 64 paths of 2 values each are 2^64 runs, not 0.
  uint64_t grid_count() const {
    uint64_t n = 1;
    for (const auto& [path, values] : grid) n = saturating_mul(n, values.size());
    return n;
  }
  size_t zip_count() const { return zip.empty() ? 1 : zip_len; }
  size_t seed_count() const { return seeds.empty() ? 1 : seeds.size(); }
};

// The base experiment and the name its runs' experiments default to.
struct BaseExperiment {
  Json raw;
  std::string name;
};

// An experiment given where a sweep belongs: said as such, not as its first
// unknown key ("seed: did you mean seeds?").
void check_not_experiment(const Json& raw) {
  for (const char* key : {"grid", "zip", "seeds", "base"}) {
    if (raw.contains(key)) return;
  }
  for (const char* key : {"problem", "optimizer", "steps", "cluster"}) {
    if (raw.contains(key)) {
      throw ConfigError(std::string("this is an experiment (it has \"") + key +
                            "\" and no \"grid\", \"zip\" or \"seeds\"), not a sweep: run it "
                            "with bitlab run, or sweep it from a sweep file such as "
                            "{\"base\": \"this-file.json\", \"grid\": {\"optimizer.lr\": "
                            "[0.01, 0.03]}} (docs/sweeps.md)",
                        key);
    }
  }
}

void check_sweep_keys(const Json& raw) {
  if (!raw.is_object()) config_fail("", raw, "a sweep must be a JSON object");
  check_not_experiment(raw);
  for (const auto& [key, value] : raw.items()) {
    if (std::find(kSweepKeys.begin(), kSweepKeys.end(), key) == kSweepKeys.end()) {
      std::string known;
      for (const auto& k : kSweepKeys) known += (known.empty() ? "" : ", ") + k;
      std::string rule = "unknown key";
      const std::string near = closest_match(key, kSweepKeys);
      if (!near.empty()) rule += "; did you mean \"" + near + "\"?";
      config_fail(key, value, rule + " (known keys: " + known + ")");
    }
  }
}

// The sweep's folder name: at most 200 bytes, as an experiment's "name"
// (sim/engine/config.cpp, kMaxNameBytes; file systems take 255).
constexpr size_t kMaxSweepNameBytes = 200;

std::string read_name(const Json& raw, const std::string& default_name) {
  if (!raw.contains("name")) return default_name;
  const Json& n = raw["name"];
  if (!n.is_string() || n.get<std::string>().empty()) {
    config_fail("name", n, "must be a non-empty string");
  }
  const std::string name = n.get<std::string>();
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    config_fail("name", n, "must not contain '/' (it names the results folder)");
  }
  if (name.size() > kMaxSweepNameBytes) {
    config_fail("name", n,
                "is " + std::to_string(name.size()) + " bytes long: at most " +
                    std::to_string(kMaxSweepNameBytes) + " (it names the results folder)");
  }
  return name;
}

std::string read_description(const Json& raw) {
  if (!raw.contains("description")) return "";
  if (!raw["description"].is_string()) {
    config_fail("description", raw["description"], "must be a string");
  }
  return raw["description"].get<std::string>();
}

// A base file is named by its stem; an inline base by the sweep.
BaseExperiment read_base(const Json& raw, const std::string& base_dir,
                         const std::string& sweep_name) {
  if (!raw.contains("base")) {
    config_fail("base", nullptr,
                "is required: an experiment file (relative to the sweep file) "
                "or an inline experiment object");
  }
  const Json& base = raw["base"];
  if (base.is_object()) return {base, sweep_name};
  if (!base.is_string()) {
    config_fail("base", base, "must be an experiment file path or an inline experiment object");
  }
  fs::path p = base.get<std::string>();
  if (p.is_relative()) p = fs::path(base_dir) / p;
  try {
    return {load_experiment_file(p.string()), p.stem().string()};
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("base = ") + show_value(base) + ": " + e.what(), "base");
  }
}

void check_path_syntax(const std::string& section, const std::string& path, const Json& value) {
  if (path.empty() || path.front() == '.' || path.back() == '.' ||
      path.find("..") != std::string::npos) {
    config_fail(section + "." + path, value,
                "the key must be a config path such as optimizer.lr (no empty parts)");
  }
}

ValueLists read_lists(const Json& raw, const std::string& section) {
  ValueLists out;
  if (!raw.contains(section)) return out;
  const Json& s = raw.at(section);
  if (!s.is_object()) {
    config_fail(section, s, "must be an object {\"config.path\": [values...]}");
  }
  for (const auto& [path, list] : s.items()) {
    check_path_syntax(section, path, list);
    if (!list.is_array() || list.empty()) {
      config_fail(section + "." + path, list, "must be a non-empty list of values");
    }
    out.emplace_back(path, std::vector<Json>(list.begin(), list.end()));
  }
  return out;
}

// The common length of the zip lists (1 without zip).
size_t zip_length(const ValueLists& zip) {
  size_t zip_len = 1;
  for (const auto& [path, values] : zip) {
    if (&zip.front().second == &values) {
      zip_len = values.size();
    } else if (values.size() != zip_len) {
      config_fail("zip." + path, Json(values),
                  "every zip list must have the same length (" + zip.front().first + " has " +
                      std::to_string(zip_len) + ", this has " + std::to_string(values.size()) +
                      ")");
    }
  }
  return zip_len;
}

// Each path is swept in one place only, and never inside another swept path.
void check_disjoint(const ValueLists& grid, const ValueLists& zip) {
  for (const auto& [path, values] : zip) {
    for (const auto& [gpath, gvalues] : grid) {
      if (gpath == path)
        config_fail("zip." + path, Json(values), "is also in grid: sweep a path in one of them");
    }
  }
  // A swept path inside another swept path ("optimizer" and "optimizer.lr")
  // would be silently overwritten by the whole object, depending on order.
  std::vector<std::pair<std::string, std::string>> all;  // path, where
  for (const auto& [path, values] : grid) all.emplace_back(path, "grid." + path);
  for (const auto& [path, values] : zip) all.emplace_back(path, "zip." + path);
  for (const auto& [a, where_a] : all) {
    for (const auto& [b, where_b] : all) {
      if (b.size() > a.size() && b.compare(0, a.size() + 1, a + ".") == 0) {
        config_fail(where_b, Json(nullptr),
                    "lies inside the also swept " + where_a +
                        ": the whole object would overwrite it; sweep the inner value inside "
                        "the object's list instead");
      }
    }
  }
}

std::vector<Json> read_seeds(const Json& raw, const ValueLists& grid, const ValueLists& zip) {
  if (!raw.contains("seeds")) return {};
  const Json& s = raw["seeds"];
  if (!s.is_array() || s.empty()) config_fail("seeds", s, "must be a non-empty list of seeds");
  for (size_t k = 0; k < s.size(); ++k) {
    if (!s[k].is_number_integer() ||
        (s[k].is_number_integer() && !s[k].is_number_unsigned() && s[k].get<int64_t>() < 0)) {
      config_fail("seeds[" + std::to_string(k) + "]", s[k], "must be an integer >= 0");
    }
  }
  for (const auto& [path, values] : grid) {
    if (path == "seed") config_fail("grid.seed", Json(values), "conflicts with \"seeds\": use one");
  }
  for (const auto& [path, values] : zip) {
    if (path == "seed") config_fail("zip.seed", Json(values), "conflicts with \"seeds\": use one");
  }
  return std::vector<Json>(s.begin(), s.end());
}

SweepAxes read_axes(const Json& raw) {
  SweepAxes axes;
  axes.grid = read_lists(raw, "grid");
  axes.zip = read_lists(raw, "zip");
  axes.zip_len = zip_length(axes.zip);
  check_disjoint(axes.grid, axes.zip);
  axes.seeds = read_seeds(raw, axes.grid, axes.zip);
  return axes;
}

// The swept paths in sweep.csv's column order ("seed" last).
std::vector<std::string> swept_paths(const SweepAxes& axes) {
  std::vector<std::string> swept;
  for (const auto& [path, values] : axes.grid) swept.push_back(path);
  for (const auto& [path, values] : axes.zip) swept.push_back(path);
  if (!axes.seeds.empty()) swept.push_back("seed");
  return swept;
}

size_t count_runs(const SweepAxes& axes, const Json& raw) {
  const uint64_t total = saturating_mul(axes.grid_count(), axes.zip_count(), axes.seed_count());
  if (total > 100000) config_fail("grid", raw.value("grid", Json()), "makes more than 100000 runs");
  return total;
}

// Run n's values (0-based): grid (first key slowest) × zip tuples × seeds
// (fastest).
std::vector<std::pair<std::string, Json>> assignments_of_run(const SweepAxes& axes, size_t n) {
  const size_t zip_count = axes.zip_count(), seed_count = axes.seed_count();
  size_t g = n / (zip_count * seed_count);
  const size_t z = (n / seed_count) % zip_count;
  const size_t s = n % seed_count;
  const ValueLists& grid = axes.grid;
  // Mixed radix, last grid key fastest.
  std::vector<size_t> gi(grid.size());
  for (size_t k = grid.size(); k-- > 0;) {
    gi[k] = g % grid[k].second.size();
    g /= grid[k].second.size();
  }
  std::vector<std::pair<std::string, Json>> assignments;
  for (size_t k = 0; k < grid.size(); ++k)
    assignments.emplace_back(grid[k].first, grid[k].second[gi[k]]);
  for (const auto& [path, values] : axes.zip) assignments.emplace_back(path, values[z]);
  if (!axes.seeds.empty()) assignments.emplace_back("seed", axes.seeds[s]);
  return assignments;
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '=' || c == '-' || c == '+' || c == '%';
    out += ok ? c : '-';
  }
  return out;
}

// For each swept path whose values are objects (whole optimizer objects in a
// zip), the keys whose values differ between them: what names the runs.
using VaryingKeys = std::map<std::string, std::vector<std::string>>;
VaryingKeys varying_keys(const SweepAxes& axes) {
  VaryingKeys out;
  for (const ValueLists* lists : {&axes.grid, &axes.zip}) {
    for (const auto& [path, values] : *lists) {
      std::set<std::string> keys;
      for (const auto& v : values) {
        if (v.is_object()) {
          for (const auto& [k, x] : v.items()) keys.insert(k);
        }
      }
      for (const auto& k : keys) {
        std::set<std::string> seen;
        for (const auto& v : values) seen.insert(v.is_object() ? v.value(k, Json()).dump() : "");
        if (seen.size() > 1) out[path].push_back(k);
      }
    }
  }
  return out;
}

// An option's value inside a label: an object (a compressor) as
// "randomk(ratio=0.1,rescale=true)", anything else as sweep_value_text.
std::string option_text(const Json& value) {
  if (!value.is_object()) return sweep_value_text(value);
  std::string args;
  for (const auto& [k, v] : value.items()) {
    if (k != "name") args += (args.empty() ? "" : ",") + k + "=" + option_text(v);
  }
  const std::string name = value.contains("name") ? sweep_value_text(value["name"]) : "";
  return name + "(" + args + ")";
}

// A swept value as a label: an object by its differing keys ("onebit_adam
// freeze_step=100"; its "name" bare), anything else as sweep_value_text.
std::string value_label(const Json& value, const std::vector<std::string>* keys) {
  if (!value.is_object() || !keys) return sweep_value_text(value);
  std::string text;
  if (value.contains("name")) text = sweep_value_text(value["name"]);
  for (const auto& k : *keys) {
    if (k == "name" || !value.contains(k)) continue;
    text += (text.empty() ? "" : " ") + k + "=" + option_text(value[k]);
  }
  return text.empty() ? sweep_value_text(value) : text;
}

// The label ("optimizer.lr=0.01, seed=2") and folder name
// ("run-001_optimizer.lr=0.01_seed=2", at most 120 characters) of a run.
void name_run(SweepRun& r, size_t width, const VaryingKeys& varying) {
  std::string idx = std::to_string(r.index);
  idx = std::string(width - idx.size(), '0') + idx;
  r.dir_name = "run-" + idx;
  for (const auto& [path, value] : r.assignments) {
    const auto it = varying.find(path);
    const std::string text = value_label(value, it == varying.end() ? nullptr : &it->second);
    r.label += (r.label.empty() ? "" : ", ") + path + "=" + text;
    r.value_texts.push_back(text);
    r.dir_name += '_';
    r.dir_name += sanitize(path + "=" + text);
  }
  if (r.dir_name.size() > 120) r.dir_name.resize(120);
}

// The base with a run's assignments: a switch of optimizer (optimizer.name,
// applied first) keeps the options the new optimizer knows (each distinct
// note of what it dropped goes to `notes`); a null removes the key, so that
// one optimizer of a zip can leave an option out.
Json apply_assignments(const Json& base, const std::vector<std::pair<std::string, Json>>& values,
                       std::set<std::string>& notes) {
  Json exp = base;
  auto is_switch = [](const std::string& path) {
    return path == "optimizer.name" || path == "optimizer";
  };
  for (const bool switches : {true, false}) {
    for (const auto& [path, value] : values) {
      if (is_switch(path) != switches) continue;
      const std::string before = raw_optimizer_name(exp);
      if (value.is_null()) {
        try {
          apply_unset(exp, path);
        } catch (const ConfigError&) {
          // not set in the base: nothing to remove
        }
      } else {
        set_json_path(exp, path, value);
      }
      if (path == "optimizer") continue;  // a whole object: its own options
      const std::string note =
          keep_known_optimizer_options(exp, before, path + "=" + sweep_value_text(value));
      if (!note.empty()) notes.insert(note);
    }
  }
  return exp;
}

// A share of the run written as a step option ("15%" for freeze_step) keeps
// its text in the label, with the step it resolved to beside it:
// "optimizer.freeze_step=15% (step 90)".
void label_resolved_steps(SweepRun& r) {
  // The assignments, then (appended as found) the leaves of assigned objects.
  std::vector<std::pair<std::string, Json>> objects(r.assignments.begin(), r.assignments.end());
  for (size_t k = 0; k < objects.size(); ++k) {
    const auto [path, value] = objects[k];  // a copy: emplace_back below reallocates
    if (value.is_object()) {
      for (const auto& [key, inner] : value.items()) objects.emplace_back(path + "." + key, inner);
    } else if (value.is_string()) {
      const std::string text = value.get<std::string>();
      const bool step = path.size() > 5 && path.compare(path.size() - 5, 5, "_step") == 0;
      if (!step || text.empty() || text.back() != '%') continue;
      const Json::json_pointer at("/" + [&path] {
        std::string p = path;
        std::replace(p.begin(), p.end(), '.', '/');
        return p;
      }());
      if (!r.config.contains(at) || !r.config[at].is_number_integer()) continue;
      const std::string key = path.substr(path.rfind('.') + 1);
      for (const std::string& written : {key + "=" + text, path + "=" + text}) {
        const size_t pos = r.label.find(written);
        if (pos == std::string::npos) continue;
        r.label.insert(pos + written.size(),
                       " (step " + std::to_string(r.config[at].get<int64_t>()) + ")");
        break;
      }
    }
  }
}

// The base with the run's assignments, resolved; `check_runs`: also built.
// `checked` holds the configurations built so far.
void resolve_run(SweepRun& r, const BaseExperiment& base, bool check_runs,
                 std::set<std::string>& checked, std::set<std::string>& notes) {
  const std::string who = "run " + std::to_string(r.index) +
                          (r.label.empty() ? std::string() : " (" + r.label + ")") + ": ";
  try {
    Json exp = apply_assignments(base.raw, r.assignments, notes);
    Experiment e = resolve_experiment(exp, base.name);
    r.config = e.resolved;
    label_resolved_steps(r);
    if (check_runs) {
      // Building the problem and shards checks the data-dependent rules;
      // seeds change only the draws, so one build per configuration.
      const std::string key_no_seed =
          e.problem.dump() + e.resolved.value("cluster", Json()).dump() + e.optimizer.dump();
      if (checked.insert(key_no_seed).second) Simulation sim(e);
    }
  } catch (const ConfigError& e) {
    throw ConfigError(who + e.what(), e.path());
  }
}

// The hyperparameters two optimizers of a comparison share: when they differ
// between the optimizers a sweep compares, their curves differ for that
// reason too (adam's bias_correction defaults to true, onebit_adam's to false).
const char* const kSharedHyperparameters[] = {
    "lr", "beta1", "beta2", "eps", "weight_decay", "bias_correction", "wire", "momentum"};

// One warning per shared hyperparameter whose values differ between the
// sweep's optimizers, naming each optimizer's values.
std::vector<std::string> hyperparameter_mismatches(const std::vector<SweepRun>& runs) {
  std::vector<std::string> warnings;
  std::set<std::string> optimizers;
  for (const auto& r : runs) optimizers.insert(r.config["optimizer"]["name"].get<std::string>());
  if (optimizers.size() < 2) return warnings;
  for (const char* field : kSharedHyperparameters) {
    // optimizer name -> the distinct values it runs with
    std::map<std::string, std::set<std::string>> values;
    for (const auto& r : runs) {
      const Json& opt = r.config["optimizer"];
      if (opt.contains(field)) values[opt["name"].get<std::string>()].insert(opt[field].dump());
    }
    std::set<std::string> all;
    for (const auto& [name, vs] : values) all.insert(vs.begin(), vs.end());
    if (values.size() < 2 || all.size() < 2) continue;
    std::string text;
    for (const auto& [name, vs] : values) {
      std::string joined;
      for (const auto& v : vs) joined += (joined.empty() ? "" : "|") + v;
      text += (text.empty() ? "" : ", ") + name + " " + joined;
    }
    warnings.push_back("optimizer." + std::string(field) +
                       " differs between the optimizers compared (" + text +
                       "): their curves differ for this reason too; set it alike in the base or "
                       "the zip if the comparison is about compression");
  }
  return warnings;
}

}  // namespace

std::string sweep_value_text(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

SweepSpec resolve_sweep(const Json& raw, const std::string& base_dir,
                        const std::string& default_name, bool check_runs) {
  check_sweep_keys(raw);
  SweepSpec spec;
  spec.name = read_name(raw, default_name);
  spec.description = read_description(raw);
  const BaseExperiment base = read_base(raw, base_dir, spec.name);
  spec.base = base.raw;
  const SweepAxes axes = read_axes(raw);
  spec.swept = swept_paths(axes);
  const size_t total = count_runs(axes, raw);
  const size_t width = std::max<size_t>(3, std::to_string(total).size());
  std::set<std::string> checked;  // problem+cluster+optimizer sections already built
  std::set<std::string> notes;
  const VaryingKeys varying = varying_keys(axes);
  for (size_t n = 0; n < total; ++n) {
    SweepRun r;
    r.index = static_cast<int>(n + 1);
    r.assignments = assignments_of_run(axes, n);
    name_run(r, width, varying);
    resolve_run(r, base, check_runs, checked, notes);
    spec.runs.push_back(std::move(r));
  }
  spec.warnings = hyperparameter_mismatches(spec.runs);
  spec.warnings.insert(spec.warnings.end(), notes.begin(), notes.end());
  return spec;
}

SweepSpec load_sweep(const std::string& file) {
  const Json raw = load_json_file(file);
  const fs::path p(file);
  if (raw.is_object()) {
    try {
      check_not_experiment(raw);
    } catch (const ConfigError& e) {
      throw ConfigError(file + ": " + e.what(), e.path());
    }
  }
  return resolve_sweep(raw, p.parent_path().string(), p.stem().string());
}

}  // namespace bitlab
