// The Python module `bitlab._bitlab`: a thin binding over the C++ core
// (python/bitlab/ is the Pythonic layer users import). It sits where the CLI
// sits (sim/layers.txt: it may include every layer, never CLI11), and does the
// CLI's work as functions without a subprocess (a sweep still runs each of its
// runs as a child `bitlab run`, as `bitlab sweep` does). JSON crosses the
// boundary as text; parameters and gradients as buffers, without copies
// (docs/python.md).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <filesystem>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "problems/datasets.hpp"
#include "problems/external.hpp"
#include "problems/real_problems.hpp"
#include "sim/cli/commands.hpp"
#include "sim/core/files.hpp"
#include "sim/core/human.hpp"
#include "sim/core/memory.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/deepspeed.hpp"
#include "sim/engine/run.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/cost.hpp"
#include "sim/lab/sweep.hpp"
#include "python/src/bindings.hpp"

namespace py = pybind11;

namespace bitlab::python {

namespace {

Json parse(const std::string& text, const std::string& source) {
  return parse_json_text(text, source);
}

// (resolved experiment, notes) of a raw experiment (JSON text) or a file.
std::pair<std::string, std::vector<std::string>> resolve(const std::string& raw_json,
                                                         const std::string& file,
                                                         const std::vector<std::string>& sets,
                                                         const std::vector<std::string>& unsets,
                                                         const std::string& default_name) {
  Experiment e;
  if (!file.empty()) {
    e = load_experiment(file, sets, unsets);
  } else {
    Json raw = parse(raw_json, "experiment");
    std::vector<std::string> notes;
    const std::string before = raw_optimizer_name(raw);
    for (const auto& u : unsets) apply_unset(raw, u);
    for (const auto& s : sets) apply_set(raw, s);
    const std::string note = keep_known_optimizer_options(raw, before, "a keyword override");
    try {
      e = resolve_experiment(raw, default_name, sets);
    } catch (const ConfigError& err) {
      rethrow_blaming_set(err, sets);
    }
    if (!note.empty()) e.notes.push_back(note);
  }
  return {e.resolved.dump(), e.notes};
}

// bitlab.run: (exit status, results folder).
std::pair<int, std::string> run(const std::string& resolved_json,
                                const std::vector<std::string>& notes, const std::string& out_dir,
                                const std::string& results_root, int threads, bool quiet,
                                int64_t checkpoint_every, bool resume) {
  Experiment e;
  if (!resume) {
    e = resolve_experiment(parse(resolved_json, "experiment"), "experiment");
    e.notes = notes;  // what resolve() noted (options an optimizer switch dropped)
  }
  RunCliOptions o;
  o.out_dir = out_dir;
  o.results_root = results_root;
  o.threads = threads;
  o.quiet = quiet;
  o.checkpoint_every = checkpoint_every;
  o.resume = resume;
  o.print_dir = false;
  o.command_line = "bitlab.run (Python)";
  if (resume) {
    const ResumePoint point = resume_point(out_dir);
    e = point.experiment;
    o.checkpoint_every = point.checkpoint_every;
  }
  py::gil_scoped_release release;
  // run_experiment chooses the folder itself; to return it, choose it first
  // (then it is fixed, as with --out) and take it away again, empty, when the
  // run refuses its input (no results folder on bad input, as the CLI).
  const bool made_here = !resume && o.out_dir.empty();
  if (made_here) o.out_dir = make_run_dir(e, o);
  try {
    return {run_experiment(e, o), o.out_dir};
  } catch (const ConfigError&) {
    std::error_code ignored;
    if (made_here) std::filesystem::remove(o.out_dir, ignored);  // only if still empty
    throw;
  }
}

// bitlab.cost: the spec as JSON text, or (raw_json empty) the file `file`, read as
// `bitlab cost FILE` reads it (a missing or non-JSON file is a ConfigError naming it).
std::string cost(const std::string& raw_json, const std::string& file,
                 const std::vector<std::string>& sets) {
  std::vector<CostOverride> overrides;
  for (const auto& s : sets) overrides.push_back({s, s});
  Json spec = file.empty() ? parse(raw_json, "cost spec") : load_experiment_file(file);
  const CostReport report = estimate_cost(resolve_cost_request(std::move(spec), overrides));
  Json out = cost_report_json(report);
  out["text"] = format_cost_report(report);
  return out.dump();
}

std::pair<int, std::string> sweep(const std::string& raw_json, const std::string& file,
                                  const std::string& base_dir, const std::string& out_dir,
                                  const std::string& results_root, int jobs, bool resume,
                                  bool quiet, const std::string& binary) {
  const SweepSpec spec = file.empty()
                             ? resolve_sweep(parse(raw_json, "sweep"), base_dir, "sweep")
                             : load_sweep(file);
  SweepOptions o;
  o.out_dir = out_dir.empty() ? (std::filesystem::path(results_root) / spec.name).string()
                              : out_dir;
  o.results_root = results_root;
  o.jobs = jobs;
  o.resume = resume;
  o.quiet = quiet;
  o.binary = binary;
  py::gil_scoped_release release;
  const int status = run_sweep(spec, o);
  return {status, o.out_dir};
}

// bitlab.from_deepspeed: (fragment JSON, the ignored fields and notes).
std::pair<std::string, std::vector<std::string>> deepspeed_lines(const DeepSpeedMapping& m) {
  std::vector<std::string> lines = m.ignored;
  for (const auto& n : m.notes) lines.push_back(n);
  return {m.experiment.dump(), lines};
}

}  // namespace

PYBIND11_MODULE(_bitlab, m) {
  m.doc() = "bitlab's C++ core (use the `bitlab` package, not this module)";
  // ConfigError is raised as bitlab.ConfigError (python/bitlab/_errors.py), a
  // ValueError carrying the field, the value and the rule.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ConfigError& e) {
      py::object cls = py::module_::import("bitlab._errors").attr("ConfigError");
      py::object err = cls(e.what(), e.path());
      PyErr_SetObject(cls.ptr(), err.ptr());
    } catch (const IoError& e) {
      // A full disk (the CLI's exit 4): OSError, as docs/python.md says.
      PyErr_SetString(PyExc_OSError, e.what());
    } catch (const std::bad_alloc&) {
      // What the memory check before the large buffers cannot foresee: the
      // CLI's "out of memory" message (sim/cli/main.cpp), as MemoryError.
      const std::string text =
          "out of memory: the run needs more than this machine's " +
          human_bytes(static_cast<double>(machine_memory_bytes())) + " (" +
          human_bytes(static_cast<double>(available_memory_bytes())) +
          " available; bitlab.validate prints a lower bound); use fewer workers or a smaller "
          "problem";
      PyErr_SetString(PyExc_MemoryError, text.c_str());
    }
  });
  m.def("version", [] { return std::string(bitlab_version()); });
  m.def("git_revision", [] { return std::string(bitlab_git_revision()); });
  m.def("resolve", &resolve, py::arg("raw_json"), py::arg("file"), py::arg("sets"),
        py::arg("unsets"), py::arg("default_name"));
  m.def("run", &run);
  m.def("cost", &cost);
  m.def("sweep", &sweep);
  // Simulation.resume: the folder checked as `bitlab run --resume DIR` checks it;
  // (resolved experiment, checkpoint interval).
  m.def("resume_point", [](const std::string& dir) {
    const ResumePoint point = resume_point(dir);
    return std::make_pair(point.experiment.resolved.dump(), point.checkpoint_every);
  });
  m.def("list_json", [] { return list_options_json().dump(); });
  m.def("list_text", [] { return format_list_options(); });
  m.def("deepspeed_file",
        [](const std::string& path) { return deepspeed_lines(load_deepspeed_config(path)); });
  m.def("deepspeed_dict", [](const std::string& text, const std::string& source) {
    return deepspeed_lines(map_deepspeed_config(parse(text, source), source));
  });
  bind_bridge(m);
  bind_builtin_problem(m);
  bind_user_side(m);
}

}  // namespace bitlab::python
