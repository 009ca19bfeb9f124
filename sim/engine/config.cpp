#include "sim/engine/config.hpp"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/core/field_error.hpp"
#include "sim/engine/deepspeed.hpp"
#include "sim/engine/deepspeed_auto.hpp"
#include "sim/engine/experiment_overrides.hpp"
#include "sim/engine/json_input.hpp"
#include "sim/timing/zero.hpp"

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
  s.field("diverge_loss_factor", &RunSettings::diverge_loss_factor,
          "the run is diverged when its train loss exceeds this multiple of its first step's "
          "(0: only a NaN or infinite loss)",
          {rules::at_least<double>(0.0)});
  s.field("diverge_grad_norm_factor", &RunSettings::diverge_grad_norm_factor,
          "the run is diverged when the measured gradient norm exceeds this multiple of its "
          "first measurement (0: only a NaN or infinite norm)",
          {rules::at_least<double>(0.0)});
  s.field("baseline", &RunSettings::baseline,
          "\"twin\": also run the optimizer's uncompressed twin (the same update with an exact "
          "allreduce and the same hyperparameters) and report the loss gap and the byte and "
          "time ratios in summary.json; \"none\": no baseline",
          {rules::one_of({"none", "twin"})});
  s.allow_key("problem")
      .allow_key("cluster")
      .allow_key("optimizer")
      .allow_key("network")
      .allow_key("compute")
      .allow_key("zero");
  return s;
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
    rethrow_with_context(err, "--set " + assignment + ": ");
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
    // The error is about the path, inside its value, or about a key on the
    // way to it (--set a.b.c.d=1 made the unknown key "a").
    const bool about_set =
        !err.path().empty() && (err.path() == path || err.path().rfind(path + ".", 0) == 0 ||
                                path.rfind(err.path() + ".", 0) == 0);
    if (about_set) {
      rethrow_with_context(err, "--set " + s + ": ");
    }
  }
  throw;
}

Json resolve_step_shares(const Json& optimizer, int64_t steps, const std::string& section) {
  if (!optimizer.is_object()) return optimizer;
  Json out = optimizer;
  for (auto& [key, value] : out.items()) {
    if (!value.is_string()) continue;
    const std::string text = value.get<std::string>();
    const bool step_option = key.size() > 5 && key.compare(key.size() - 5, 5, "_step") == 0;
    if (!step_option || text.empty() || text.back() != '%') continue;
    double share = -1.0;
    size_t used = 0;
    try {
      share = std::stod(text.substr(0, text.size() - 1), &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != text.size() - 1 || !(share >= 0.0 && share <= 100.0)) {
      config_fail(join_path(section, key), value,
                  "a share of the run must be a number from 0 to 100 followed by %, e.g. "
                  "\"15%\"");
    }
    value = static_cast<int64_t>(std::llround(share / 100.0 * static_cast<double>(steps)));
  }
  return out;
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

// An experiment's "name" names its results folder: file systems take 255
// bytes a name (NAME_MAX); 200 keeps room for a temporary suffix. (A sweep's
// name has the same rule: sim/lab/sweep_spec.cpp, read_name.)
constexpr size_t kMaxNameBytes = 200;

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
  if (e.run.name.size() > kMaxNameBytes) {
    config_fail("name", Json(e.run.name),
                "is " + std::to_string(e.run.name.size()) + " bytes long: at most " +
                    std::to_string(kMaxNameBytes) + " (it names the results folder)");
  }
  e.problem = resolve_named(raw, "problem", problem_registry());
  Json with_steps = raw;
  if (raw.contains("optimizer")) {
    with_steps["optimizer"] = resolve_step_shares(raw["optimizer"], e.run.steps, "optimizer");
  }
  e.optimizer = resolve_named(with_steps, "optimizer", optimizer_registry());
  if (e.run.baseline == "twin") {
    const Twin twin = twin_optimizer(e.optimizer);
    if (twin.optimizer.is_null()) config_fail("baseline", Json("twin"), twin.why_none);
  }
  const Json cluster_raw = raw.contains("cluster") ? raw.at("cluster") : Json::object();
  const auto cluster_schema = ClusterOptions::schema();
  e.cluster = cluster_schema.read(cluster_raw, "cluster");

  const auto network_schema = NetworkOptions::schema();
  const auto compute_schema = ComputeOptions::schema();
  e.network =
      network_schema.read(raw.contains("network") ? raw.at("network") : Json::object(), "network");
  e.compute =
      compute_schema.read(raw.contains("compute") ? raw.at("compute") : Json::object(), "compute");
  if (e.network.timed()) make_topology(e.network, e.cluster.workers);  // validates
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
  // ZeRO (sim/timing/zero.hpp) is priced by `bitlab cost`; the simulated
  // update is the same at every stage. Written back only when given, so an
  // experiment without it resolves as before.
  if (raw.contains("zero")) {
    r["zero"] = ZeroOptions::schema().write(read_zero_options(raw.at("zero"), "zero"));
  }
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

std::string raw_optimizer_name(const Json& raw) {
  if (!raw.is_object() || !raw.contains("optimizer") || !raw["optimizer"].is_object()) return "";
  const Json& name = raw["optimizer"].value("name", Json());
  return name.is_string() ? name.get<std::string>() : "";
}

std::string keep_known_optimizer_options(Json& raw, const std::string& previous_name,
                                         const std::string& why) {
  const std::string name = raw_optimizer_name(raw);
  // Without a previous optimizer nothing is switched: unknown keys stay errors.
  if (name.empty() || previous_name.empty() || name == previous_name) return "";
  const auto* entry = find_entry(optimizer_registry(), name);
  if (!entry) return "";  // resolution names the unknown optimizer
  std::set<std::string> known = {"name"};
  for (const auto& f : entry->fields) known.insert(f.name);
  std::string dropped;
  Json& opt = raw["optimizer"];
  for (auto it = opt.begin(); it != opt.end();) {
    if (known.count(it.key())) {
      ++it;
      continue;
    }
    dropped += (dropped.empty() ? "" : ", ") + it.key();
    it = opt.erase(it);
  }
  if (dropped.empty()) return "";
  return why + ": " + name + " does not know " + previous_name + "'s " + dropped +
         " (dropped; the shared options are kept)";
}

void apply_override(Json& raw, const std::string& assignment, const std::string& why,
                    std::vector<std::string>& notes) {
  // A switch of optimizer drops the old one's foreign options at once, so
  // that a later --set may give the new one's.
  const std::string before = raw_optimizer_name(raw);
  apply_set(raw, assignment);
  const std::string note = keep_known_optimizer_options(raw, before, why);
  if (!note.empty()) notes.push_back(note);
}

namespace {

// Merges `child` over `base` in place (RFC 7396: objects key by key, a null
// removes the key), switching the optimizer as keep_known_optimizer_options.
void merge_over_base(Json& base, const Json& child, const std::string& file,
                     std::vector<std::string>* notes) {
  const std::string base_optimizer = raw_optimizer_name(base);
  base.merge_patch(child);
  const std::string note = keep_known_optimizer_options(base, base_optimizer, file);
  if (!note.empty() && notes) notes->push_back(note);
}

// "deepspeed_config": a DeepSpeed JSON config (relative to the file's folder,
// as "base" is) read by load_deepspeed_config; its fragment goes under the
// file's own keys, which win, and its ignored fields and notes become notes.
// The key itself is removed, so the resolved config.json re-runs as it is.
Json with_deepspeed_config(const std::string& path, Json raw, std::vector<std::string>* notes) {
  const Json value = raw.contains("deepspeed_config") ? raw["deepspeed_config"] : Json();
  raw.erase("deepspeed_config");
  // The Trainer's arguments for the config's "auto" values (deepspeed_auto.hpp).
  const Json trainer_args = raw.contains("deepspeed_auto") ? raw["deepspeed_auto"] : Json();
  raw.erase("deepspeed_auto");
  if (!value.is_string() || value.get<std::string>().empty()) {
    throw ConfigError(path + ": deepspeed_config = " + show_value(value) +
                          ": must be the path of a DeepSpeed JSON config (ds_config.json)",
                      "deepspeed_config");
  }
  std::filesystem::path ds_path = value.get<std::string>();
  if (ds_path.is_relative()) ds_path = std::filesystem::path(path).parent_path() / ds_path;
  DeepSpeedMapping ds;
  try {
    ds = map_deepspeed_config_with_auto(load_json_file(ds_path.string()), trainer_args,
                                        ds_path.string());
  } catch (const ConfigError& e) {
    // The field is the experiment's (the key naming the file), the rule the
    // DeepSpeed reader's whole message (which names the DeepSpeed field).
    throw FieldError(path + ": deepspeed_config = " + show_value(value) + ": " + e.what(),
                     "deepspeed_config", show_value(value), e.what());
  }
  if (notes) {
    notes->push_back(path + ": optimizer and cluster read from DeepSpeed config " +
                     ds_path.string() + " (the file's own keys win)");
    for (const auto& line : ds.ignored) notes->push_back(ds_path.string() + ": ignored " + line);
    for (const auto& line : ds.notes) notes->push_back(ds_path.string() + ": " + line);
  }
  Json merged = std::move(ds.experiment);
  merge_over_base(merged, raw, path, notes);
  return merged;
}

// "network.file" in an experiment file names a path relative to that file's
// folder (as "base" does); made absolute here, so the resolved config.json
// finds it from anywhere.
void anchor_network_file(Json& raw, const std::string& path) {
  if (!raw.is_object() || !raw.contains("network") || !raw["network"].is_object()) return;
  Json& net = raw["network"];
  if (!net.contains("file") || !net["file"].is_string()) return;  // the schema names a bad type
  const std::filesystem::path file = net["file"].get<std::string>();
  if (file.empty() || file.is_absolute()) return;
  net["file"] = std::filesystem::absolute(std::filesystem::path(path).parent_path() / file)
                    .lexically_normal()
                    .string();
}

// A message that grew with a chain of bases (each file adds its name) kept to
// kMaxBaseMessageBytes: its start (the file given) and its end (the error),
// cut between whole UTF-8 characters.
std::string bounded_message(const std::string& text) {
  if (text.size() <= kMaxBaseMessageBytes) return text;
  const auto on_char = [&text](size_t at) {
    while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    return at;
  };
  const size_t head = on_char(kMaxBaseMessageBytes / 4);
  const size_t tail = on_char(text.size() - kMaxBaseMessageBytes / 2);
  return text.substr(0, head) + " [...] " + text.substr(tail);
}

// An error about the chain as a whole (a cycle, too deep): said once, from the
// file given, not wrapped again by every file of the chain (64 wrappings made
// one line of 6 kB).
class BaseChainError : public ConfigError {
 public:
  using ConfigError::ConfigError;
};

// "a -> b -> c", or with more than 6 files "a -> b -> ... (60 more) -> y -> z".
std::string chain_text(const std::vector<std::string>& chain, const std::string& last) {
  std::vector<std::string> files = chain;
  files.push_back(last);
  std::string text;
  const size_t n = files.size();
  for (size_t k = 0; k < n; ++k) {
    if (n > 6 && k == 2) {
      text += " -> ... (" + std::to_string(n - 4) + " more)";
      k = n - 3;
      continue;
    }
    text += (k ? " -> " : "") + files[k];
  }
  return text;
}

Json load_with_bases(const std::string& path, std::vector<std::string>& chain,
                     std::vector<std::string>* notes) {
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  for (const auto& seen : chain) {
    if (seen == canonical) {
      throw BaseChainError(bounded_message(chain.front() + ": \"base\" makes a cycle: " +
                                           chain_text(chain, canonical)),
                           "base");
    }
  }
  // Each base is one more level of recursion (30,000 overflowed the stack).
  if (chain.size() >= static_cast<size_t>(kMaxBaseDepth)) {
    throw BaseChainError(bounded_message(
                             chain.front() + ": a chain of \"base\" files deeper than " +
                             std::to_string(kMaxBaseDepth) + ": " + chain_text(chain, canonical) +
                             "; an experiment needs a few: make a file near the start a whole "
                             "experiment"),
                         "base");
  }
  chain.push_back(canonical);
  Json raw = load_json_file(path);
  anchor_network_file(raw, path);
  for (const char* key : {"grid", "zip", "seeds"}) {
    // A sweep file given where an experiment belongs (bitlab run, validate).
    if (raw.is_object() && raw.contains(key)) {
      throw ConfigError(path + ": this is a sweep file (it has \"" + key +
                            "\"), not an experiment: use bitlab sweep " + path,
                        key);
    }
  }
  if (raw.is_object() && (raw.contains("deepspeed_config") || raw.contains("deepspeed_auto"))) {
    raw = with_deepspeed_config(path, std::move(raw), notes);
  }
  if (!raw.is_object() || !raw.contains("base")) return raw;
  const Json base_value = raw["base"];
  raw.erase("base");
  if (!base_value.is_string()) {
    throw ConfigError(path + ": base = " + show_value(base_value) +
                          ": must be the path of another experiment file",
                      "base");
  }
  std::filesystem::path base_path = base_value.get<std::string>();
  if (base_path.is_relative()) {
    base_path = std::filesystem::path(path).parent_path() / base_path;
  }
  Json merged;
  try {
    merged = load_with_bases(base_path.string(), chain, notes);
  } catch (const BaseChainError&) {
    throw;
  } catch (const ConfigError& e) {
    throw ConfigError(
        bounded_message(path + ": base = " + show_value(base_value) + ": " + e.what()), "base");
  }
  if (!merged.is_object()) {
    throw ConfigError(
        path + ": base = " + show_value(base_value) + ": is not an experiment (a JSON object)",
        "base");
  }
  merge_over_base(merged, raw, path, notes);
  return merged;
}

}  // namespace

Json load_experiment_file(const std::string& path, std::vector<std::string>* notes) {
  std::vector<std::string> chain;
  return load_with_bases(path, chain, notes);
}

void apply_unset(Json& raw, const std::string& path) {
  Json* node = &raw;
  size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    const std::string key =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (key.empty() || !node->is_object() || !node->contains(key)) {
      throw ConfigError("--unset " + path + ": not set (nothing to remove)", path);
    }
    if (dot == std::string::npos) {
      node->erase(key);
      return;
    }
    node = &(*node)[key];
    start = dot + 1;
  }
}

Experiment resolve_with_overrides(Json raw, const std::string& default_name,
                                  const std::vector<std::string>& sets,
                                  const std::vector<std::string>& unsets,
                                  std::vector<std::string> notes) {
  for (const auto& u : unsets) apply_unset(raw, u);
  for (const auto& s : sets) {
    const std::string ds_key = "deepspeed_config=";
    if (s.rfind(ds_key, 0) == 0) {
      // As in a file: the DeepSpeed config fills in, what is set already wins;
      // a relative path is relative to the working folder.
      const std::string ds_file = s.substr(ds_key.size());
      raw["deepspeed_config"] =
          ds_file.empty() ? ds_file : std::filesystem::absolute(ds_file).string();
      raw = with_deepspeed_config("--set " + s, std::move(raw), &notes);
      continue;
    }
    apply_override(raw, s, "--set " + s, notes);
  }
  Experiment e = resolve_experiment(raw, default_name, sets);
  e.notes = std::move(notes);
  return e;
}

Experiment load_experiment(const std::string& file, const std::vector<std::string>& sets,
                           const std::vector<std::string>& unsets) {
  std::vector<std::string> notes;
  Json raw = load_experiment_file(file, &notes);
  return resolve_with_overrides(std::move(raw), std::filesystem::path(file).stem().string(), sets,
                                unsets, std::move(notes));
}

Experiment twin_experiment(const Experiment& e) {
  Json raw = e.resolved;
  raw["optimizer"] = twin_optimizer(e.optimizer).optimizer;
  raw["baseline"] = "none";
  return resolve_experiment(raw, e.run.name);
}

}  // namespace bitlab
