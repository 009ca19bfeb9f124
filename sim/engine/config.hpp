// Experiment files: parsing (syntax errors with line and column), `--set`
// overrides, and resolution into a validated Experiment with every default
// filled in. The resolved JSON is what a results folder saves as config.json.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/cluster/cluster.hpp"
#include "sim/core/schema.hpp"
#include "sim/timing/network.hpp"

namespace bitlab {

// Top-level settings of a run.
struct RunSettings {
  std::string name;         // experiment name; default: the file's stem
  std::string description;  // free text, copied to the results
  uint64_t seed = 0;
  int64_t steps = 100;
  int64_t eval_every = 0;       // 0: evaluate only after the last step
  int64_t grad_norm_every = 1;  // 0: never measure the mean gradient's norm
  static Schema<RunSettings> schema();
};

struct Experiment {
  RunSettings run;
  ClusterOptions cluster;
  Json problem;            // resolved: {"name": ..., every option}
  Json optimizer;          // resolved
  NetworkOptions network;  // preset "none": no time model
  ComputeOptions compute;
  Json resolved;  // the whole resolved experiment
};

// The one way bitlab reads JSON from a user (experiment, sweep and cost files,
// --set values). Every failure is a ConfigError naming the source: a syntax
// error as "<source>:<line>:<column>: JSON syntax error: ...", a number out of
// range (1e400), nesting deeper than kMaxJsonDepth, a key given twice in one
// object.
inline constexpr int kMaxJsonDepth = 64;
Json parse_json_text(const std::string& text, const std::string& source);
// Reads and parses a file (a missing or unreadable file, or one longer than
// kMaxJsonFileBytes, is a ConfigError).
inline constexpr size_t kMaxJsonFileBytes = size_t{64} << 20;
Json load_json_file(const std::string& path);

// Applies one "a.b.c=value" override to a raw experiment. The value is read as
// JSON when it parses (3, 0.1, true, "x", [1,2]) and as a plain string
// otherwise (adam, full).
void apply_set(Json& raw, const std::string& assignment);

// Sets `value` at the dotted `path` of `raw`, creating objects on the way. A
// non-object on the way or an empty key is a ConfigError naming the path
// walked so far.
void set_json_path(Json& raw, const std::string& path, const Json& value);

// Called from a catch block: rethrows `err` as "--set <a>: <what>" when the
// error lies at or under the path of one of `sets` (the last such --set, the
// one in effect), else rethrows it unchanged.
[[noreturn]] void rethrow_blaming_set(const ConfigError& err, const std::vector<std::string>& sets);

// Validates a raw experiment and fills every default. `default_name` is used
// when the file has no "name". Errors raised by a path set with --set are
// reported with that --set.
Experiment resolve_experiment(const Json& raw, const std::string& default_name,
                              const std::vector<std::string>& sets = {});

// Loads FILE, applies the --set overrides and resolves.
Experiment load_experiment(const std::string& file, const std::vector<std::string>& sets);

}  // namespace bitlab
