// What bitlab.torch's reporting and signal handling read from the core, and
// the Trainer's "auto" values of a DeepSpeed config (issue 47; kept apart from
// the CLI's functions in module.cpp):
// - request_stop(sig): what the CLI's SIGTERM/SIGHUP handler does
//   (sim/engine/run_steps.cpp, on_stop_signal): the run stops after the step
//   in flight, with its checkpoint and an "interrupted" summary naming the
//   signal. bitlab.torch calls it from its Python signal handler
//   (python/bitlab/_signals.py), so Python's own handlers stay in place.
// - memory_bytes(): the machine's memory and what is available now, as the
//   memory check before a run reads them (sim/core/memory.hpp).
// - deepspeed_auto(text, file, args): a DeepSpeed config with its "auto"
//   values filled from the Trainer's arguments, mapped (deepspeed_auto.hpp).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "python/src/bindings.hpp"
#include "sim/core/memory.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/deepspeed_auto.hpp"
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
  m.def(
      "deepspeed_auto",
      [](const std::string& text, const std::string& file, const std::string& args_json) {
        const Json ds = file.empty() ? parse_json_text(text, "deepspeed config")
                                     : load_json_file(file);
        const DeepSpeedMapping mapped = map_deepspeed_config_with_auto(
            ds, parse_json_text(args_json, "auto"), file.empty() ? "deepspeed config" : file,
            "auto");
        std::vector<std::string> lines = mapped.ignored;
        lines.insert(lines.end(), mapped.notes.begin(), mapped.notes.end());
        return std::make_pair(mapped.experiment.dump(), lines);
      },
      py::arg("text"), py::arg("file"), py::arg("args_json"),
      "(experiment fragment JSON, notes) of a DeepSpeed config (JSON text, or the file `file`) "
      "with its \"auto\" values filled from the Trainer's arguments `args_json`.");
}

}  // namespace bitlab::python
