// The "auto" values of a Hugging Face DeepSpeed config. The Trainer writes
// them from its TrainingArguments before DeepSpeed reads the file
// (transformers, src/transformers/integrations/deepspeed.py,
// HfTrainerDeepSpeedConfig.trainer_config_process and
// trainer_config_finalize); bitlab does the same from the arguments a user
// gives (Python: from_deepspeed(cfg, auto={...}); an experiment file:
// "deepspeed_auto": {...} beside "deepspeed_config"). docs/deepspeed.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/core/schema.hpp"
#include "sim/engine/deepspeed.hpp"

namespace bitlab {

struct DeepSpeedAutoFill {
  Json config;                      // the DeepSpeed config with the values filled in
  std::vector<std::string> notes;   // "field = value (from argument)", one per "auto"
};

// Fills every "auto" of `ds` that `args` (the Trainer's arguments by their
// TrainingArguments names: learning_rate, per_device_train_batch_size, ...)
// determines, as fill_match does; a value that is not "auto" and differs
// from its argument is a mismatch, all of them refused in one ConfigError
// as the Trainer refuses them. "auto" in the sections bitlab ignores
// (scheduler, ZeRO's bucket sizes, amp) may stay. Throws ConfigError for an
// unknown argument (with "did you mean") or a value of the wrong type.
// `args_name` names the arguments in messages ("deepspeed_auto", Python's "auto").
DeepSpeedAutoFill fill_deepspeed_auto(Json ds, const Json& args, const std::string& source,
                                      const std::string& args_name = "deepspeed_auto");

// Throws one ConfigError listing every "auto" left in a field bitlab reads,
// each with the Trainer argument that fills it and the Trainer's default;
// does nothing when there is none. map_deepspeed_config calls it first.
void refuse_unfilled_auto(const Json& ds, const std::string& source);

// fill_deepspeed_auto, then map_deepspeed_config (with `workers`, as there);
// the filled values come first in the mapping's notes. `args` null: no
// argument given.
DeepSpeedMapping map_deepspeed_config_with_auto(const Json& ds, const Json& args,
                                                const std::string& source,
                                                const std::string& args_name = "deepspeed_auto",
                                                std::optional<int64_t> workers = std::nullopt);

}  // namespace bitlab
