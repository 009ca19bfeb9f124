// The parts of the module `bitlab._bitlab` defined in their own files.
#pragma once

#include <pybind11/pybind11.h>

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

}  // namespace bitlab::python
