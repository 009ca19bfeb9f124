// What bitlab.torch's reporting and signal handling read from the core (kept
// apart from the CLI's functions in module.cpp):
// - request_stop(sig): what the CLI's SIGTERM/SIGHUP handler does
//   (sim/engine/run_steps.cpp, on_stop_signal): the run stops after the step
//   in flight, with its checkpoint and an "interrupted" summary naming the
//   signal. bitlab.torch calls it from its Python signal handler
//   (python/bitlab/_signals.py), so Python's own handlers stay in place.
// - memory_bytes(): the machine's memory and what is available now, as the
//   memory check before a run reads them (sim/core/memory.hpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "python/src/bindings.hpp"
#include "sim/core/memory.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"

namespace py = pybind11;

namespace bitlab::python {

void bind_user_side(py::module_& m) {
  m.def(
      "request_stop", [](int sig) { g_interrupted.store(sig); }, py::arg("signal"),
      "Asks every running bitlab run of this process to stop after its step in flight, "
      "recording `signal` (its number) as the reason, as the CLI's signal handler does.");
  m.def(
      "stop_requested", [] { return g_interrupted.load(); },
      "The stop signal asked for so far (its number), 0 if none.");
  m.def(
      "memory_bytes",
      [] { return std::make_pair(machine_memory_bytes(), available_memory_bytes()); },
      "(this machine's memory, the memory available now), in bytes, as bitlab's memory check "
      "reads them.");
}

}  // namespace bitlab::python
