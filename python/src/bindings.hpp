// What the files of the module `bitlab._bitlab` share (module.cpp binds the
// CLI's work as functions; bridge.cpp and builtin_problem.cpp their classes).
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "sim/core/schema.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"

namespace bitlab::python {

// BridgeRun: a RunSession over an ExternalProblem (python/src/bridge.cpp), what
// bitlab.torch.Simulation drives.
void bind_bridge(pybind11::module_& m);
// BuiltinProblem: a built-in problem's workers, batches and gradients one by
// one (python/src/builtin_problem.cpp), for the bridge's equivalence tests and
// for users who want bitlab's data in torch.
void bind_builtin_problem(pybind11::module_& m);
// Stop requests, memory figures and DeepSpeed "auto" values
// (python/src/user_side.cpp), for bitlab.torch and bitlab.from_deepspeed.
void bind_user_side(pybind11::module_& m);

// Python data as JSON, without text in between: dict (str keys), list,
// tuple, str, int, float, bool and None, what bitlab._checks.to_json gives
// (which checks a user's values and names them). An int outside 64 bits
// becomes a float, as the JSON parser reads one; anything else, or a str that
// is not valid Unicode, is a ConfigError naming `where`.
Json to_json(pybind11::handle value, const std::string& where);
// JSON as Python data (dict, list, str, int, float, bool, None).
pybind11::object to_python(const Json& value);

// The optimizer's warnings about an experiment's settings (Optimizer::warnings:
// a warm-up as long as the run, none at all), which change what the run
// computes: what `bitlab run` says before its first step.
std::vector<std::string> setting_warnings(const Experiment& experiment);
// Those warnings, said on stderr even when options.quiet keeps the run itself
// silent (the run says them when it is not quiet).
void say_setting_warnings_when_quiet(const Experiment& experiment,
                                     const RunOptions& options);

}  // namespace bitlab::python
