// DeepSpeed configs read as they are: maps the JSON a user passes to
// deepspeed.initialize (ds_config.json) to a raw bitlab experiment fragment,
// "optimizer" and "cluster", with DeepSpeed's own defaults written out. Every
// field DeepSpeed knows is either mapped, listed as ignored with the reason,
// or refused when it changes the algorithm in a way bitlab cannot do; a field
// DeepSpeed does not know is refused. docs/deepspeed.md has the table.
//
// An experiment file names one with "deepspeed_config" (config.cpp,
// load_experiment_file): the fragment goes under the file's own keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/schema.hpp"

namespace bitlab {

struct DeepSpeedMapping {
  // A raw experiment fragment: "optimizer": {...}, "cluster": {...} (either
  // may be absent: a config without "optimizer" leaves it to the experiment).
  Json experiment;
  // "field.path: why it means nothing in a simulator", one per ignored field
  // present in the config.
  std::vector<std::string> ignored;
  // How something was mapped that a user might not expect.
  std::vector<std::string> notes;
};

// Throws ConfigError "<source>: <field.path> = <value>: <rule>" for unknown
// fields, unsupported optimizer types and bad values (the error's path, value
// and rule are those parts). `workers`: the world size when the caller gives
// it (bitlab.torch.Simulation's workers=), which DeepSpeed's batch rules
// then use and the notes name; else it is derived from the batch fields.
DeepSpeedMapping map_deepspeed_config(const Json& ds, const std::string& source,
                                      std::optional<int64_t> workers = std::nullopt);

// Reads `path` with load_json_file and maps it; `path` is the source.
DeepSpeedMapping load_deepspeed_config(const std::string& path,
                                       std::optional<int64_t> workers = std::nullopt);

}  // namespace bitlab
