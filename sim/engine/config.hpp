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
#include "sim/engine/json_input.hpp"
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
  // A run is `diverged` when its train loss exceeds this multiple of its
  // first step's (0: only a NaN or infinite loss counts) ...
  double diverge_loss_factor = 100.0;
  // ... or the measured gradient norm this multiple of its first measurement.
  double diverge_grad_norm_factor = 1e4;
  // "twin": also run the optimizer's uncompressed twin (twin_optimizer) on the
  // same problem, cluster and seed, and report the gaps in summary.json.
  std::string baseline = "none";
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
  // What bitlab did that the user may not expect (options dropped by an
  // optimizer switch): printed before the run and kept in summary.json.
  std::vector<std::string> notes;
};


// Reads an experiment file and the chain of files it names as "base": the
// file's keys override its base's (objects merged key by key, anything else
// replaced, a null removes the key); a relative base is relative to the
// file's folder. A missing base, a base that is not an experiment object and
// a cycle are ConfigErrors naming the files, as is a chain deeper than
// kMaxBaseDepth files; the message, which names every file of the chain, is
// kept under about kMaxBaseMessageBytes. Switching optimizer.name in a
// file drops the base's options the new optimizer does not know (a note).
inline constexpr int kMaxBaseDepth = 64;
inline constexpr size_t kMaxBaseMessageBytes = 4096;
Json load_experiment_file(const std::string& path, std::vector<std::string>* notes = nullptr);

// Removes the key at the dotted `path` ("--unset optimizer.freeze_step": the
// option's default applies again). A path that is not set is a ConfigError.
void apply_unset(Json& raw, const std::string& path);

// When `raw`'s optimizer.name differs from `previous_name`, removes the
// optimizer options the new optimizer does not know and returns a note
// naming them ("" when nothing was dropped), so that a switch of optimizer
// keeps the shared hyperparameters (lr, betas, ...) and drops the rest.
std::string keep_known_optimizer_options(Json& raw, const std::string& previous_name,
                                         const std::string& why);

// apply_set, then keep_known_optimizer_options when the assignment switched
// the optimizer; its note (`why`: how the user gave it) goes to `notes`.
// What run, validate and cost do with each override, in order, so that a
// later --set may give the new optimizer's options.
void apply_override(Json& raw, const std::string& assignment, const std::string& why,
                    std::vector<std::string>& notes);

// The optimizer name of a raw experiment ("" when there is none).
std::string raw_optimizer_name(const Json& raw);

// An optimizer's step options (names ending in "_step": freeze_step,
// var_freeze_step) may be given as a share of the run, "15%": returns
// `optimizer` with each such value replaced by round(15/100 · steps). A
// malformed share is a ConfigError naming <section>.<field>.
Json resolve_step_shares(const Json& optimizer, int64_t steps, const std::string& section);

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

// The experiment of `e`'s twin baseline: the same with the optimizer
// replaced by its uncompressed twin and no baseline of its own.
Experiment twin_experiment(const Experiment& e);

// Validates a raw experiment and fills every default. `default_name` is used
// when the file has no "name". Errors raised by a path set with --set are
// reported with that --set.
Experiment resolve_experiment(const Json& raw, const std::string& default_name,
                              const std::vector<std::string>& sets = {});

// Loads FILE (with its base chain), applies the --unset and --set overrides
// (unsets first) and resolves. A --set of optimizer.name keeps only the
// options the new optimizer knows, with a note.
Experiment load_experiment(const std::string& file, const std::vector<std::string>& sets,
                           const std::vector<std::string>& unsets = {});

}  // namespace bitlab
