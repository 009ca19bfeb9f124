// BridgeRun: the C++ half of bitlab.torch.Simulation (python/bitlab/torch.py).
// A RunSession (sim/engine/run.hpp) over an ExternalProblem
// (problems/external.hpp): the Python side hands in each worker's gradient
// buffers (pointers into tensors it keeps alive until the step has run), the
// step copies each once into the cluster's rows and runs the optimizer and
// its exchange, and the model's parameters are numpy views of the cluster's
// own (no copy either way). Checks of what Python hands in (shapes, dtypes,
// devices, the worker protocol) live on the Python side, where the user's
// names are; this side trusts them.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "problems/external.hpp"
#include "python/src/bindings.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/engine/simulation.hpp"

namespace py = pybind11;

namespace bitlab::python {

namespace {

struct BridgeOptions {
  std::string out_dir, results_root = "results";
  int threads = 0;
  bool quiet = false;
  int64_t checkpoint_every = 0;
  bool resume = false;  // continue the run in out_dir from its checkpoint
};

ExternalOptions external_options(const Experiment& e) {
  if (e.problem.value("name", "") != "external") {
    throw ConfigError("problem.name = \"" + e.problem.value("name", "") +
                          "\": a bridge run's problem is \"external\" (the model's tensors)",
                      "problem.name");
  }
  Json options = e.problem;
  options.erase("name");
  return ExternalOptions::schema().read(options, "problem");
}

class BridgeRun {
 public:
  BridgeRun(const std::string& resolved_json, py::array_t<float, py::array::c_style> initial,
            std::vector<std::string> eval_columns, py::object evaluate, const BridgeOptions& bo)
      : evaluate_(std::move(evaluate)) {
    RunCliOptions o;
    o.out_dir = bo.out_dir;
    o.results_root = bo.results_root;
    o.threads = bo.threads;
    o.quiet = bo.quiet;
    o.checkpoint_every = bo.checkpoint_every;
    o.resume = bo.resume;
    o.print_dir = false;
    o.command_line = "bitlab.torch.Simulation (Python)";
    Experiment e;
    if (bo.resume) {
      const ResumePoint point = resume_point(bo.out_dir);
      e = point.experiment;
      o.checkpoint_every = point.checkpoint_every;
    } else {
      e = resolve_experiment(parse_json_text(resolved_json, "experiment"), "experiment");
    }
    std::vector<float> x0(initial.data(), initial.data() + initial.size());
    auto problem = std::make_unique<ExternalProblem>(
        external_options(e), static_cast<int>(e.cluster.workers), std::move(x0));
    problem_ = problem.get();
    if (!eval_columns.empty()) {
      const size_t count = eval_columns.size();
      problem->set_evaluator(std::move(eval_columns),
                             [this, count](std::span<const float>, std::span<double> out) {
                               evaluate_into(count, out);
                             });
    }
    session_ = std::make_unique<RunSession>(e, o, std::move(problem));
  }

  // The synchronised parameters (or worker w's own copy) as a float32 array
  // over the cluster's memory, kept alive by this object.
  static py::object params_view(py::object self_obj, int worker) {
    BridgeRun& self = self_obj.cast<BridgeRun&>();
    Cluster& cluster = self.session_->simulation().cluster();
    if (worker >= 0 && !cluster.has_local_params()) return py::none();
    const std::span<float> x = worker < 0 ? cluster.params() : cluster.params(worker);
    return py::array_t<float>({static_cast<py::ssize_t>(x.size())}, {sizeof(float)}, x.data(),
                              self_obj);
  }

  // Worker w's gradient row in the cluster (a float32 array over its memory,
  // kept alive by this object): where the bridge copies the worker's .grad.
  static py::object grad_row(py::object self_obj, int worker) {
    BridgeRun& self = self_obj.cast<BridgeRun&>();
    Cluster& cluster = self.session_->simulation().cluster();
    if (worker < 0 || worker >= cluster.workers()) throw py::index_error("worker out of range");
    const std::span<float> g = cluster.grad(worker);
    return py::array_t<float>({static_cast<py::ssize_t>(g.size())}, {sizeof(float)}, g.data(),
                              self_obj);
  }

  void set_gradients(int worker, const std::vector<uintptr_t>& data, std::optional<double> loss) {
    std::vector<const float*> ptrs;
    ptrs.reserve(data.size());
    for (const uintptr_t p : data) ptrs.push_back(reinterpret_cast<const float*>(p));
    problem_->set_gradients(worker, std::move(ptrs), loss);
  }

  bool step(std::optional<std::vector<double>> compute_s) {
    if (compute_s) session_->simulation().set_next_compute_s(std::move(*compute_s));
    try {
      const bool go_on = session_->step();
      problem_->clear_gradients();
      return go_on;
    } catch (...) {
      problem_->clear_gradients();
      throw;
    }
  }

  std::vector<py::dict> tensors() const {
    std::vector<py::dict> out;
    for (const auto& t : problem_->tensors()) {
      out.push_back(py::dict(py::arg("name") = t.name, py::arg("offset") = t.offset,
                             py::arg("size") = t.size));
    }
    return out;
  }

  RunSession& session() { return *session_; }
  double copy_seconds() const { return problem_->copy_seconds(); }

 private:
  void evaluate_into(size_t count, std::span<double> out) {
    py::gil_scoped_acquire gil;
    const std::vector<double> values = evaluate_().cast<std::vector<double>>();
    if (values.size() != count) {
      throw ConfigError("evaluate returned " + std::to_string(values.size()) + " values for " +
                        std::to_string(count) + " eval columns");
    }
    std::copy(values.begin(), values.end(), out.begin());
  }

  py::object evaluate_;
  ExternalProblem* problem_ = nullptr;  // owned by the session's simulation
  std::unique_ptr<RunSession> session_;
};

}  // namespace

void bind_bridge(py::module_& m) {
  py::class_<BridgeOptions>(m, "BridgeOptions")
      .def(py::init<>())
      .def_readwrite("out_dir", &BridgeOptions::out_dir)
      .def_readwrite("results_root", &BridgeOptions::results_root)
      .def_readwrite("threads", &BridgeOptions::threads)
      .def_readwrite("quiet", &BridgeOptions::quiet)
      .def_readwrite("checkpoint_every", &BridgeOptions::checkpoint_every)
      .def_readwrite("resume", &BridgeOptions::resume);
  py::class_<BridgeRun>(m, "BridgeRun")
      .def(py::init<const std::string&, py::array_t<float, py::array::c_style>,
                    std::vector<std::string>, py::object, const BridgeOptions&>())
      .def("params", [](py::object self) { return BridgeRun::params_view(self, -1); })
      .def("local_params", [](py::object self, int w) { return BridgeRun::params_view(self, w); })
      .def("grad_row", [](py::object self, int w) { return BridgeRun::grad_row(self, w); })
      .def("set_gradients", &BridgeRun::set_gradients)
      .def("step", &BridgeRun::step, py::arg("compute_s") = py::none())
      .def("finish", [](BridgeRun& b) { return b.session().finish(); })
      .def("fail", [](BridgeRun& b, const std::string& why) { return b.session().fail(why); })
      .def("warn", [](BridgeRun& b, const std::string& text) { b.session().warn(text); })
      .def_property_readonly("tensors", &BridgeRun::tensors)
      .def_property_readonly("copy_seconds", &BridgeRun::copy_seconds)
      .def_property_readonly("dir", [](BridgeRun& b) { return b.session().dir(); })
      .def_property_readonly(
          "status", [](BridgeRun& b) { return std::string(run_status_name(b.session().status())); })
      .def_property_readonly("ended", [](BridgeRun& b) { return b.session().ended(); })
      .def_property_readonly("finished", [](BridgeRun& b) { return b.session().finished(); })
      .def_property_readonly("steps_done",
                             [](BridgeRun& b) { return b.session().simulation().steps_done(); })
      .def_property_readonly("config", [](BridgeRun& b) {
        return b.session().simulation().experiment().resolved.dump();
      });
}

}  // namespace bitlab::python
