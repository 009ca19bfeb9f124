// The one override sequence of an experiment: --unset paths first, then each
// --set in order (an optimizer switch keeping the options the new optimizer
// knows, a deepspeed_config filling in under what is set already), then
// resolution. `bitlab run`/`validate` reach it through load_experiment (a
// file); bitlab.run and bitlab.torch.Simulation (python/src/module.cpp) with
// an experiment given as Python data. Kept out of config.hpp so that its
// callers alone depend on it.
#pragma once

#include <string>
#include <vector>

#include "sim/engine/config.hpp"

namespace bitlab {

// `raw`: the experiment as read (a file's base chain already merged);
// `notes`: what reading it said so far, kept first in the result's notes.
Experiment resolve_with_overrides(Json raw, const std::string& default_name,
                                  const std::vector<std::string>& sets,
                                  const std::vector<std::string>& unsets,
                                  std::vector<std::string> notes = {});

}  // namespace bitlab
