// The Python module `bitlab._bitlab`: a thin binding over the C++ core
// (python/bitlab/ is the Pythonic layer users import). It is the layer
// python/ of sim/layers.txt: beside the CLI, on the layers below it, never on
// the CLI or CLI11. It does the CLI's work as functions without a subprocess
// (a sweep still runs each of its runs as a child `bitlab run`, as `bitlab
// sweep` does). Experiments and results cross the boundary as Python data
// (dicts, lists) or as the engine's own objects (Experiment, RunOptions), never
// as text to be parsed again; parameters and gradients as buffers, without
// copies (docs/python.md). python/bitlab/_bitlab.pyi gives every signature.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "python/src/bindings.hpp"
#include "sim/core/field_error.hpp"
#include "sim/core/files.hpp"
#include "sim/core/human.hpp"
#include "sim/core/memory.hpp"
#include "sim/engine/catalogue.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/deepspeed.hpp"
#include "sim/engine/deepspeed_auto.hpp"
#include "sim/engine/experiment_overrides.hpp"
#include "sim/engine/gradient_error.hpp"
#include "sim/engine/run.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/cost.hpp"
#include "sim/lab/sweep.hpp"

namespace py = pybind11;

namespace bitlab::python {

Json to_json(py::handle value, const std::string& where) {
  if (value.is_none()) return Json(nullptr);
  if (py::isinstance<py::bool_>(value)) return Json(value.cast<bool>());
  if (py::isinstance<py::int_>(value)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow == 0) return Json(static_cast<int64_t>(x));
    if (overflow > 0) {
      const unsigned long long u = PyLong_AsUnsignedLongLong(value.ptr());
      if (!PyErr_Occurred()) return Json(static_cast<uint64_t>(u));
      PyErr_Clear();
    }
    const double d = PyLong_AsDouble(value.ptr());  // what the JSON parser makes of it
    if (PyErr_Occurred()) {
      PyErr_Clear();
      config_fail(where, Json("(an int)"), "is too large for a 64-bit float");
    }
    return Json(d);
  }
  if (py::isinstance<py::float_>(value)) {
    const double d = value.cast<double>();
    if (!std::isfinite(d)) config_fail(where, Json(std::to_string(d)), "must be finite");
    return Json(d);
  }
  if (py::isinstance<py::str>(value)) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(value.ptr(), &size);
    if (text == nullptr) {
      PyErr_Clear();
      config_fail(where, Json::value_t::discarded, "is not valid Unicode text (a lone surrogate?)");
    }
    return Json(std::string(text, static_cast<size_t>(size)));
  }
  if (py::isinstance<py::dict>(value)) {
    Json out = Json::object();
    for (const auto& [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key)) {
        config_fail(where, Json::value_t::discarded, "a key that is not a str is not a JSON key");
      }
      const std::string k = to_json(key, where).get<std::string>();
      out[k] = to_json(item, join_path(where, k));
    }
    return out;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    Json out = Json::array();
    size_t i = 0;
    for (const auto& item : value) {
      out.push_back(to_json(item, where + "[" + std::to_string(i++) + "]"));
    }
    return out;
  }
  config_fail(where, Json::value_t::discarded,
              "a " + std::string(py::str(py::type::of(value).attr("__name__"))) +
                  " is not a JSON value");
}

py::object to_python(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return py::none();
    case Json::value_t::boolean:
      return py::bool_(value.get<bool>());
    case Json::value_t::number_integer:
      return py::int_(value.get<int64_t>());
    case Json::value_t::number_unsigned:
      return py::int_(value.get<uint64_t>());
    case Json::value_t::number_float:
      return py::float_(value.get<double>());
    case Json::value_t::string:
      return py::str(value.get_ref<const std::string&>());
    case Json::value_t::array: {
      py::list out;
      for (const auto& item : value) out.append(to_python(item));
      return out;
    }
    case Json::value_t::object: {
      py::dict out;
      for (const auto& [key, item] : value.items()) out[py::str(key)] = to_python(item);
      return out;
    }
    default:
      return py::none();  // binary and discarded values never come out of the engine
  }
}

std::vector<std::string> setting_warnings(const Experiment& experiment) {
  // Constructing the optimizer only reads its options (bitlab cost does the same).
  const auto* entry =
      find_entry(optimizer_registry(), experiment.optimizer.at("name").get<std::string>());
  return entry->make(experiment.optimizer)->warnings(experiment.run.steps);
}

void say_setting_warnings_when_quiet(const Experiment& experiment,
                                     const RunOptions& options) {
  if (!options.quiet) return;  // the run says them itself
  for (const auto& w : setting_warnings(experiment)) {
    std::fprintf(stderr, "bitlab: warning: %s\n", w.c_str());
  }
}

namespace {

// bitlab.resolve: an experiment (Python data, or `file`) with its overrides,
// through the engine's one override sequence.
Experiment resolve(const py::object& experiment, const std::string& file,
                   const std::vector<std::string>& sets, const std::vector<std::string>& unsets) {
  if (!file.empty()) return load_experiment(file, sets, unsets);
  // The engine's one override sequence, as `bitlab run --set` applies it.
  return resolve_with_overrides(to_json(experiment, ""), "experiment", sets, unsets);
}

// bitlab.run: (exit status, results folder).
std::pair<int, std::string> run(const Experiment* experiment, RunOptions o) {
  o.print_dir = false;
  o.command_line = "bitlab.run (Python)";
  if (!o.resume && experiment == nullptr) {
    throw ConfigError("run: give an experiment, or options.resume with options.out_dir");
  }
  const Experiment e = o.resume ? experiment_to_resume(o) : *experiment;
  say_setting_warnings_when_quiet(e, o);
  py::gil_scoped_release release;
  // run_experiment chooses the folder itself; to return it, choose it first
  // (then it is fixed, as with --out) and take it away again, empty, when the
  // run refuses its input (no results folder on bad input, as the CLI).
  const bool made_here = !o.resume && o.out_dir.empty();
  if (made_here) o.out_dir = make_run_dir(e, o);
  try {
    return {run_experiment(e, o), o.out_dir};
  } catch (const ConfigError&) {
    std::error_code ignored;
    if (made_here) std::filesystem::remove(o.out_dir, ignored);  // only if still empty
    throw;
  }
}

// bitlab.cost: the spec, or (spec None) the file `file`, read as `bitlab cost
// FILE` reads it (a missing or non-JSON file is a ConfigError naming it).
py::object cost(const py::object& spec, const std::string& file,
                const std::vector<std::string>& sets) {
  std::vector<CostOverride> overrides;
  for (const auto& s : sets) overrides.push_back({s, s});
  Json raw = file.empty() ? to_json(spec, "") : load_experiment_file(file);
  const CostReport report = estimate_cost(resolve_cost_request(std::move(raw), overrides));
  Json out = cost_report_json(report);
  out["text"] = format_cost_report(report);
  return to_python(out);
}

std::pair<int, std::string> sweep(const py::object& spec, const std::string& file,
                                  const std::string& base_dir, const std::string& out_dir,
                                  const std::string& results_root, int jobs, bool resume,
                                  bool quiet, const std::string& binary) {
  const SweepSpec s = file.empty() ? resolve_sweep(to_json(spec, ""), base_dir, "sweep")
                                   : load_sweep(file);
  SweepOptions o;
  o.out_dir =
      out_dir.empty() ? (std::filesystem::path(results_root) / s.name).string() : out_dir;
  o.results_root = results_root;
  o.jobs = jobs;
  o.resume = resume;
  o.quiet = quiet;
  o.binary = binary;
  py::gil_scoped_release release;
  const int status = run_sweep(s, o);
  return {status, o.out_dir};
}

// bitlab.from_deepspeed: the fragment and what the mapping said, as data:
// "ignored" (fields that mean nothing in a simulator), "notes" (how something
// was mapped) and "warnings" (what changes the run's answer: the optimizer's
// own warnings for `steps`, when given).
py::dict deepspeed(const py::object& config, const std::string& file,
                   std::optional<int64_t> workers, std::optional<int64_t> steps,
                   const py::object& trainer_args) {
  const Json args = trainer_args.is_none() ? Json() : to_json(trainer_args, "auto");
  const std::string source = file.empty() ? "deepspeed config" : file;
  const DeepSpeedMapping m = map_deepspeed_config_with_auto(
      file.empty() ? to_json(config, "") : load_json_file(file), args, source, "auto", workers);
  std::vector<std::string> warnings;
  if (steps && m.experiment.contains("optimizer")) {
    const Json opt = resolve_step_shares(m.experiment["optimizer"], *steps, "optimizer");
    const auto* entry = find_entry(optimizer_registry(), opt.at("name").get<std::string>());
    warnings = entry->make(entry->resolve(opt, "optimizer"))->warnings(*steps);
  }
  py::dict out;
  out["experiment"] = to_python(m.experiment);
  out["ignored"] = py::cast(m.ignored);
  out["notes"] = py::cast(m.notes);
  out["warnings"] = py::cast(warnings);
  return out;
}

// ConfigError as bitlab.ConfigError (python/bitlab/_errors.py), its parts as
// attributes; NonFiniteGradient as bitlab.GradientError, with its worker and
// element too; IoError as OSError; bad_alloc as MemoryError.
void translate_errors(std::exception_ptr p) {
  const auto none_if_empty = [](const std::string& s) -> py::object {
    return s.empty() ? py::object(py::none()) : py::object(py::str(s));
  };
  try {
    if (p) std::rethrow_exception(p);
  } catch (const NonFiniteGradient& e) {
    py::object cls = py::module_::import("bitlab._errors").attr("GradientError");
    py::object err = cls(e.what(), py::arg("field") = e.parameter(),
                         py::arg("value") = none_if_empty(e.value()),
                         py::arg("rule") = none_if_empty(e.rule()), py::arg("worker") = e.worker(),
                         py::arg("element") = e.element());
    PyErr_SetObject(cls.ptr(), err.ptr());
  } catch (const FieldError& e) {
    py::object cls = py::module_::import("bitlab._errors").attr("ConfigError");
    py::object err = cls(e.what(), none_if_empty(e.path()), none_if_empty(e.value()),
                         none_if_empty(e.rule()));
    PyErr_SetObject(cls.ptr(), err.ptr());
  } catch (const ConfigError& e) {
    // Not about one value (a missing file, a cycle of bases): the message is the rule.
    py::object cls = py::module_::import("bitlab._errors").attr("ConfigError");
    py::object err = cls(e.what(), none_if_empty(e.path()));
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
}

void bind_options(py::module_& m) {
  py::class_<RunOptions>(m, "RunOptions", R"doc(How a run is run, for bitlab.run and bitlab.torch.Simulation alike.

The engine's run options (RunOptions, sim/engine/run.hpp), the one
structure `bitlab run` fills from its flags. Not what the run computes: that
is the Experiment.

Args:
    out_dir: the results folder; "" for results/<name>/<optimizer>-seed<seed>.
    results_root: the folder under which a default results folder goes.
    threads: OpenMP threads, 0 for OpenMP's default.
    quiet: no progress or report on stderr (warnings that change the answer
        are still said).
    checkpoint_every: a checkpoint every k steps, 0 for never.
    resume: continue the run in out_dir from its checkpoint.
)doc")
      .def(py::init([](std::string out_dir, std::string results_root, int threads, bool quiet,
                       int64_t checkpoint_every, bool resume) {
             RunOptions o;
             o.out_dir = std::move(out_dir);
             o.results_root = std::move(results_root);
             o.threads = threads;
             o.quiet = quiet;
             o.checkpoint_every = checkpoint_every;
             o.resume = resume;
             return o;
           }),
           py::kw_only(), py::arg("out_dir") = "", py::arg("results_root") = "results",
           py::arg("threads") = 0, py::arg("quiet") = false, py::arg("checkpoint_every") = 0,
           py::arg("resume") = false)
      .def_readwrite("out_dir", &RunOptions::out_dir, "the results folder (\"\": the default)")
      .def_readwrite("results_root", &RunOptions::results_root, "where default folders go")
      .def_readwrite("threads", &RunOptions::threads, "OpenMP threads (0: OpenMP's default)")
      .def_readwrite("quiet", &RunOptions::quiet, "no progress or report on stderr")
      .def_readwrite("checkpoint_every", &RunOptions::checkpoint_every,
                     "a checkpoint every k steps (0: never)")
      .def_readwrite("resume", &RunOptions::resume, "continue the run in out_dir");

  py::class_<Experiment>(m, "Experiment", R"doc(A resolved experiment: every default filled in, validated.

Made by resolve() (the engine's one override sequence); run() and BridgeRun
take it as it is, without resolving it again.
)doc")
      .def_property_readonly(
          "config", [](const Experiment& e) { return to_python(e.resolved); },
          "The resolved experiment as a dict (what config.json holds).")
      .def_readonly("notes", &Experiment::notes,
                    "What bitlab did that the user may not expect (options an optimizer "
                    "switch dropped, a DeepSpeed file's mapping), as a list of str.")
      .def_property_readonly("warnings", &setting_warnings,
                             "The optimizer's warnings about these settings (a warm-up as long "
                             "as the run: it never compresses), as a list of str.")
      .def_property_readonly(
          "name", [](const Experiment& e) { return e.run.name; }, "The experiment's name.");
}

void bind_run_functions(py::module_& m) {
  m.def("version", [] { return std::string(bitlab_version()); },
        "bitlab's version.\n\nReturns:\n    str: e.g. \"0.1.0\".");
  m.def("git_revision", [] { return std::string(bitlab_git_revision()); },
        "The git revision bitlab was built from.\n\nReturns:\n    str: 12 hex digits, "
        "\"-dirty\" when the tree had changes, or \"unknown\".");
  m.def("resolve", &resolve, py::kw_only(), py::arg("experiment") = py::none(),
        py::arg("file") = "", py::arg("sets") = std::vector<std::string>{},
        py::arg("unsets") = std::vector<std::string>{},
        R"doc(Resolves an experiment with its overrides, as `bitlab validate` does.

Args:
    experiment: the experiment as Python data (a dict), when file is "".
    file: an experiment file (with its "base" chain and deepspeed_config).
    sets: "path=value" assignments, applied in order after the unsets.
    unsets: paths removed first, so that their defaults apply.

Returns:
    Experiment: resolved, with its notes.

Raises:
    bitlab.ConfigError: bad input (field, value, rule).
)doc");
  m.def("run", &run, py::arg("experiment"), py::arg("options"),
        R"doc(Runs an experiment to its end, as `bitlab run` does.

Args:
    experiment: a resolved Experiment; None with options.resume.
    options: the RunOptions (options.resume continues options.out_dir).

Returns:
    tuple[int, str]: the exit status (0 completed, 3 diverged, 4 failed to
    write, 128 + signal interrupted) and the results folder.

Raises:
    bitlab.ConfigError: bad input, before any results folder exists.
)doc");
  m.def(
      "resume_point",
      [](const std::string& folder) {
        const ResumePoint point = resume_point(folder);
        return std::make_pair(to_python(point.experiment.resolved), point.checkpoint_every);
      },
      py::arg("folder"),
      R"doc(Checks a run folder as `bitlab run --resume DIR` does.

Args:
    folder: the run's results folder.

Returns:
    tuple[dict, int]: the run's resolved experiment and its checkpoint interval.

Raises:
    bitlab.ConfigError: no run there, a completed or diverged run, no checkpoint.
)doc");
}

void bind_lab_functions(py::module_& m) {
  m.def("cost", &cost, py::kw_only(), py::arg("spec") = py::none(), py::arg("file") = "",
        py::arg("sets") = std::vector<std::string>{},
        R"doc(Prices a training job without training it, as `bitlab cost --json` does.

Args:
    spec: a cost spec or an experiment as Python data, when file is "".
    file: a cost spec or experiment file.
    sets: "path=value" assignments.

Returns:
    dict: the report (as `bitlab cost --json` prints it), with "text", the table.
)doc");
  m.def("sweep", &sweep, py::kw_only(), py::arg("spec") = py::none(), py::arg("file") = "",
        py::arg("base_dir") = ".", py::arg("out_dir") = "", py::arg("results_root") = "results",
        py::arg("jobs") = 0, py::arg("resume") = false, py::arg("quiet") = true,
        py::arg("binary") = "bitlab",
        R"doc(Runs a sweep, each run a child `bitlab run`, as `bitlab sweep` does.

Args:
    spec: the sweep as Python data, when file is "".
    file: a sweep file.
    base_dir: the folder a spec's relative "base" path is read from.
    out_dir: the sweep's folder; "" for results_root/<name>.
    results_root: where a default sweep folder goes.
    jobs: runs at a time, 0 for the machine's cores.
    resume: keep the runs a previous sweep into out_dir finished.
    quiet: no progress on stderr.
    binary: the bitlab binary that runs each run.

Returns:
    tuple[int, str]: the exit status and the sweep's folder.
)doc");
  m.def("list_json", [] { return to_python(list_options_json()); },
        "Everything `bitlab list --json` prints.\n\nReturns:\n    dict: the option "
        "catalogue, by section (\"problems\", \"optimizers\", ...).");
  m.def("list_text", &format_list_options,
        "Everything `bitlab list` prints.\n\nReturns:\n    str: the option catalogue as text.");
  m.def("deepspeed", &deepspeed, py::kw_only(), py::arg("config") = py::none(),
        py::arg("file") = "", py::arg("workers") = py::none(), py::arg("steps") = py::none(),
        py::arg("auto") = py::none(),
        R"doc(Maps a DeepSpeed config (ds_config.json) to a bitlab experiment fragment.

Args:
    config: the DeepSpeed config as Python data, when file is "".
    file: a DeepSpeed JSON config file.
    workers: the world size when the caller gives it (DeepSpeed's batch rules
        then use it); None to derive it from the batch fields.
    steps: the run's steps, for the optimizer's warnings; None for none.
    auto: the Hugging Face Trainer's arguments (a dict by TrainingArguments
        names) that fill the config's "auto" values; None for none.

Returns:
    dict: "experiment" (the fragment: "optimizer", "cluster", maybe
    "compute"), "ignored", "notes" and "warnings" (lists of str).

Raises:
    bitlab.ConfigError: an unknown field, an unsupported optimizer or a bad
    value, with field, value and rule.
)doc");
}

}  // namespace

PYBIND11_MODULE(_bitlab, m) {
  m.doc() = "bitlab's C++ core (use the `bitlab` package, not this module)";
  py::register_exception_translator(&translate_errors);
  bind_options(m);
  bind_run_functions(m);
  bind_lab_functions(m);
  bind_bridge(m);
  bind_builtin_problem(m);
  bind_user_side(m);
}

}  // namespace bitlab::python
