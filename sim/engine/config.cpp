#include "sim/engine/config.hpp"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"

namespace bitlab {

Schema<RunSettings> RunSettings::schema() {
  Schema<RunSettings> s;
  s.field("name", &RunSettings::name,
          "experiment name: results go to results/<name>/...; default: the file's name");
  s.field("description", &RunSettings::description, "free text, kept with the results");
  s.field("seed", &RunSettings::seed,
          "seed of every random stream of the run (sharding, batches, init, noise)");
  s.field("steps", &RunSettings::steps, "optimizer steps to run",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(int64_t{1} << 32)});
  s.field("eval_every", &RunSettings::eval_every,
          "evaluate on held-out data every k steps (0: only after the last step)",
          {rules::at_least<int64_t>(0)});
  s.field("grad_norm_every", &RunSettings::grad_norm_every,
          "measure the norm of the workers' mean gradient every k steps (0: never); a "
          "measurement, not communication: no bytes are counted",
          {rules::at_least<int64_t>(0)});
  s.allow_key("problem")
      .allow_key("cluster")
      .allow_key("optimizer")
      .allow_key("network")
      .allow_key("compute");
  return s;
}

namespace {

// Where byte `at` (0-based) of `text` is, as "line:column" (1-based).
std::string line_and_column(const std::string& text, size_t at) {
  at = std::min(at, text.size());
  size_t line = 1, col = 1;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return std::to_string(line) + ":" + std::to_string(col);
}

// nlohmann prefixes "[json.exception.parse_error.101] parse error at line 3, column 5: ".
std::string without_json_prefix(const std::string& what) {
  const auto colon = what.find(": ");
  const auto bracket = what.find("] ");
  if (colon != std::string::npos) return what.substr(colon + 2);
  return bracket != std::string::npos ? what.substr(bracket + 2) : what;
}

// Refuses, while parsing, what the JSON grammar allows but bitlab cannot use
// safely: nesting deeper than kMaxJsonDepth (deeper documents would only
// overflow the stack of the code that walks them later) and a key given twice
// in one object (nlohmann keeps the last silently; the user meant one of them).
class StrictParse {
 public:
  explicit StrictParse(std::string source) : source_(std::move(source)) {}

  bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
    using E = Json::parse_event_t;
    if ((event == E::object_start || event == E::array_start) && depth >= kMaxJsonDepth) {
      throw ConfigError(source_ + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                        " levels; bitlab's files are at most a few levels deep");
    }
    if (event == E::object_start) keys_.emplace_back();
    if (event == E::object_end && !keys_.empty()) keys_.pop_back();
    if (event == E::key && !keys_.empty()) {
      const std::string key = parsed.get<std::string>();
      if (!keys_.back().insert(key).second) {
        throw ConfigError(source_ + ": key \"" + key +
                          "\" appears twice in one object; give it once");
      }
    }
    return true;
  }

 private:
  std::string source_;
  std::vector<std::set<std::string>> keys_;  // the keys of each open object
};

}  // namespace

Json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text, StrictParse(source));
  } catch (const Json::parse_error& e) {
    const size_t at = e.byte > 0 ? e.byte - 1 : 0;
    throw ConfigError(source + ":" + line_and_column(text, at) +
                      ": JSON syntax error: " + without_json_prefix(e.what()));
  } catch (const Json::out_of_range& e) {
    // e.g. 1e400: "number overflow parsing '1e400'"
    throw ConfigError(source + ": " + without_json_prefix(e.what()) +
                      ": numbers must fit a 64-bit float or integer");
  } catch (const Json::exception& e) {
    throw ConfigError(source + ": " + without_json_prefix(e.what()));
  }
}

// Whether text is well-formed UTF-8, as a JSON string must be: the JSON
// library's own check (its serializer refuses ill-formed UTF-8).
static bool is_valid_utf8(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::type_error&) {
    return false;
  }
}

Json load_json_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw ConfigError(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) {
    throw ConfigError(path + ": is a directory, expected an experiment .json file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot be read");
  // Read in pieces up to a bound: a path to /dev/zero or to a huge file would
  // otherwise be read until memory runs out. Pipes (bash's <(...)) still work.
  std::string text;
  char piece[1 << 16];
  while (in.read(piece, sizeof piece) || in.gcount() > 0) {
    text.append(piece, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxJsonFileBytes) {
      throw ConfigError(path + ": longer than " + std::to_string(kMaxJsonFileBytes >> 20) +
                        " MiB; an experiment, sweep or cost file is a few kB (is it the right "
                        "file?)");
    }
  }
  if (in.bad()) throw ConfigError(path + ": cannot be read");
  return parse_json_text(text, path);
}

void apply_set(Json& raw, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError("--set " + assignment +
                      ": must have the form path=value (e.g. optimizer.lr=0.01)");
  }
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  // Keys become JSON strings too: a path with a stray byte would reach the
  // serializer (every error message prints its path) and fail there.
  if (!is_valid_utf8(path)) {
    throw ConfigError(
        "--set ...=" + std::string(text.size() <= 40 && is_valid_utf8(text) ? text : "...") +
        ": the path is not valid UTF-8 text");
  }
  if (!is_valid_utf8(text)) {
    throw ConfigError("--set " + path + "=...: the value is not valid UTF-8 text");
  }
  Json value;
  // A value of thousands of characters is not echoed whole.
  const std::string source =
      "--set " + (assignment.size() > 80 ? assignment.substr(0, 77) + "..." : assignment);
  try {
    value = parse_json_text(text, source);
  } catch (const ConfigError& e) {
    // Not JSON: a bare word (adam, full, ...) is meant as a string. Anything
    // that is JSON but refused (too deep, a duplicate key, a number out of
    // range) stays refused.
    if (std::string(e.what()).find(": JSON syntax error: ") == std::string::npos) throw;
    value = text;
  }
  try {
    set_json_path(raw, path, value);
  } catch (const ConfigError& err) {
    throw ConfigError("--set " + assignment + ": " + err.what());
  }
}

void set_json_path(Json& raw, const std::string& path, const Json& value) {
  Json* node = &raw;
  std::string walked;
  size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty()) throw ConfigError("empty key in path \"" + path + "\"", walked);
    if (!node->is_object()) {
      throw ConfigError(walked + " is not an object, so it has no key \"" + key + "\"", walked);
    }
    walked = join_path(walked, key);
    if (dot == std::string::npos) {
      (*node)[key] = value;
      return;
    }
    if (!node->contains(key)) (*node)[key] = Json::object();
    node = &(*node)[key];
    start = dot + 1;
  }
}

void rethrow_blaming_set(const ConfigError& err, const std::vector<std::string>& sets) {
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) {
    const std::string& s = *it;
    const std::string path = s.substr(0, s.find('='));
    if (!err.path().empty() && (err.path() == path || err.path().rfind(path + ".", 0) == 0)) {
      throw ConfigError("--set " + s + ": " + err.what(), err.path());
    }
  }
  throw;
}

namespace {

template <class Base>
Json resolve_named(const Json& raw, const std::string& section,
                   const std::vector<RegistryEntry<Base>>& registry) {
  if (!raw.contains(section)) {
    config_fail(section, Json(nullptr), "missing; it must be an object with a \"name\"");
  }
  const Json& obj = raw.at(section);
  if (!obj.is_object()) config_fail(section, obj, "must be a JSON object with a \"name\"");
  if (!obj.contains("name")) {
    std::string names;
    for (const auto& e : registry) names += (names.empty() ? "" : ", ") + e.name;
    config_fail(join_path(section, "name"), Json(nullptr), "missing; one of: " + names);
  }
  const Json& name = obj.at("name");
  if (!name.is_string()) config_fail(join_path(section, "name"), name, "must be a string");
  const auto* entry = find_entry(registry, name.get<std::string>());
  if (!entry) {
    std::vector<std::string> names;
    for (const auto& e : registry) names.push_back(e.name);
    config_fail(join_path(section, "name"), name, one_of_message(name.get<std::string>(), names));
  }
  return entry->resolve(obj, section);
}

Experiment resolve_inner(const Json& raw, const std::string& default_name) {
  if (!raw.is_object()) config_fail("", raw, "an experiment must be a JSON object");
  Experiment e;
  e.run = RunSettings::schema().read(raw, "");
  if (e.run.name.empty()) e.run.name = default_name;
  for (char c : e.run.name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      config_fail("name", Json(e.run.name),
                  "must use only letters, digits, '-', '_' and '.' (it names a folder)");
    }
  }
  if (e.run.name.empty() || e.run.name[0] == '.') {
    config_fail("name", Json(e.run.name), "must not be empty or start with '.'");
  }
  e.problem = resolve_named(raw, "problem", problem_registry());
  e.optimizer = resolve_named(raw, "optimizer", optimizer_registry());
  const Json cluster_raw = raw.contains("cluster") ? raw.at("cluster") : Json::object();
  const auto cluster_schema = ClusterOptions::schema();
  e.cluster = cluster_schema.read(cluster_raw, "cluster");

  const auto network_schema = NetworkOptions::schema();
  const auto compute_schema = ComputeOptions::schema();
  e.network =
      network_schema.read(raw.contains("network") ? raw.at("network") : Json::object(), "network");
  e.compute =
      compute_schema.read(raw.contains("compute") ? raw.at("compute") : Json::object(), "compute");
  if (e.network.preset != "none") make_topology(e.network, e.cluster.workers);  // validates
  if (e.compute.straggler_worker >= e.cluster.workers) {
    config_fail("compute.straggler_worker", Json(e.compute.straggler_worker),
                "must be < cluster.workers (" + std::to_string(e.cluster.workers) + ") or -1");
  }

  Json& r = e.resolved = RunSettings::schema().write(e.run);
  r["problem"] = e.problem;
  r["cluster"] = cluster_schema.write(e.cluster);
  r["optimizer"] = e.optimizer;
  r["network"] = network_schema.write(e.network);
  r["compute"] = compute_schema.write(e.compute);
  return e;
}

}  // namespace

Experiment resolve_experiment(const Json& raw, const std::string& default_name,
                              const std::vector<std::string>& sets) {
  try {
    return resolve_inner(raw, default_name);
  } catch (const ConfigError& err) {
    rethrow_blaming_set(err, sets);  // names the --set that caused it, if one did
  }
}

Experiment load_experiment(const std::string& file, const std::vector<std::string>& sets) {
  Json raw = load_json_file(file);
  for (const auto& s : sets) apply_set(raw, s);
  return resolve_experiment(raw, std::filesystem::path(file).stem().string(), sets);
}

}  // namespace bitlab
