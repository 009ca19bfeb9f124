// BuiltinProblem: one of bitlab's own problems taken apart for Python — its
// initial parameters, each worker's batch at each step (the cluster's own
// sampler), each worker's loss and gradient, its evaluation, and the data of
// the real data sets. The bridge's equivalence tests feed these gradients
// back through bitlab.torch's lower layer and compare with `bitlab run`
// (tests/python/test_equivalence.py); a torch model reads the same data and
// batches.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "problems/datasets.hpp"
#include "problems/problem.hpp"
#include "python/src/bindings.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/engine/config.hpp"

namespace py = pybind11;

namespace bitlab::python {

namespace {

py::array_t<float> to_array(std::span<const float> v) {
  py::array_t<float> out(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), out.mutable_data());
  return out;
}

class BuiltinProblem {
 public:
  explicit BuiltinProblem(const py::object& experiment)
      : e_(resolve_experiment(to_json(experiment, ""), "experiment")) {
    const auto* entry = find_entry(problem_registry(), e_.problem.at("name").get<std::string>());
    problem_ = entry->make(e_.problem);
    const auto shards = make_shards(*problem_, e_.cluster, e_.run.seed);
    for (size_t w = 0; w < shards.size(); ++w) {
      samplers_.emplace_back(shards[w], e_.cluster.batch_size, e_.run.seed,
                             static_cast<uint32_t>(w));
    }
    ws_ = problem_->make_workspace();
  }

  size_t dim() const { return problem_->dim(); }
  int workers() const { return static_cast<int>(samplers_.size()); }

  py::array_t<float> init_params() const {
    std::vector<float> x(problem_->dim());
    problem_->init_params(x, e_.run.seed);
    return to_array(x);
  }

  std::vector<py::dict> tensors() const {
    std::vector<py::dict> out;
    for (const auto& t : problem_->tensors()) {
      out.push_back(py::dict(py::arg("name") = t.name, py::arg("offset") = t.offset,
                             py::arg("size") = t.size, py::arg("rows") = t.rows,
                             py::arg("cols") = t.cols));
    }
    return out;
  }

  py::array_t<uint32_t> batch(int worker, int64_t step) {
    check_worker(worker);
    std::vector<uint32_t> b;
    samplers_[static_cast<size_t>(worker)].sample(step, b);
    py::array_t<uint32_t> out(static_cast<py::ssize_t>(b.size()));
    std::copy(b.begin(), b.end(), out.mutable_data());
    return out;
  }

  // Worker `worker`'s loss and gradient at step `step` and parameters x, as
  // the cluster computes them (its batch, its noise stream).
  std::pair<double, py::array_t<float>> loss_grad(py::array_t<float, py::array::c_style> x,
                                                  int worker, int64_t step) {
    check_worker(worker);
    check_dim(x);
    std::vector<uint32_t> b;
    samplers_[static_cast<size_t>(worker)].sample(step, b);
    std::vector<float> g(problem_->dim());
    const RngStream noise(e_.run.seed, Purpose::kGradNoise, static_cast<uint32_t>(worker),
                          static_cast<uint64_t>(step));
    WorkerBatch job{b, g, &noise, 0.0, worker};
    problem_->loss_grad_workers({x.data(), static_cast<size_t>(x.size())}, {&job, 1}, *ws_);
    return {job.loss, to_array(g)};
  }

  std::vector<double> evaluate(py::array_t<float, py::array::c_style> x) const {
    check_dim(x);
    std::vector<double> out(problem_->eval_columns().size());
    problem_->evaluate({x.data(), static_cast<size_t>(x.size())}, out);
    return out;
  }

  std::vector<std::string> eval_columns() const { return problem_->eval_columns(); }

 private:
  void check_worker(int worker) const {
    if (worker < 0 || worker >= workers()) {
      throw py::index_error("worker " + std::to_string(worker) + " not in [0, " +
                            std::to_string(workers()) + ")");
    }
  }
  void check_dim(const py::array_t<float, py::array::c_style>& x) const {
    if (static_cast<size_t>(x.size()) != problem_->dim()) {
      throw py::value_error("parameters hold " + std::to_string(x.size()) + " values; the problem " +
                            std::to_string(problem_->dim()));
    }
  }
  Experiment e_;
  std::unique_ptr<Problem> problem_;
  std::vector<BatchSampler> samplers_;
  std::unique_ptr<Workspace> ws_;
};

// A real data set as the real problems see it (split, subsampled, scaled):
// train_x, train_y, test_x, test_y, classes, and the image size if any.
py::dict dataset(const py::object& problem) {
  const Json p = to_json(problem, "problem");
  DatasetOptions o;
  o.dataset = p.value("dataset", o.dataset);
  o.data_dir = p.value("data_dir", o.data_dir);
  o.train_samples = p.value("train_samples", o.train_samples);
  o.test_samples = p.value("test_samples", o.test_samples);
  o.test_fraction = p.value("test_fraction", o.test_fraction);
  o.train_eval_samples = p.value("train_eval_samples", o.train_eval_samples);
  o.data_seed = p.value("data_seed", o.data_seed);
  const DatasetSplit split = load_dataset(o);
  auto matrix = [](const RowMatrixF& m) {
    py::array_t<float> out({static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
    std::copy(m.data(), m.data() + m.size(), out.mutable_data());
    return out;
  };
  return py::dict(py::arg("train_x") = matrix(split.train.x),
                  py::arg("train_y") = py::array(py::cast(split.train.labels)),
                  py::arg("test_x") = matrix(split.test.x),
                  py::arg("test_y") = py::array(py::cast(split.test.labels)),
                  py::arg("classes") = split.classes, py::arg("height") = split.height,
                  py::arg("width") = split.width);
}

}  // namespace

void bind_builtin_problem(py::module_& m) {
  py::class_<BuiltinProblem>(m, "BuiltinProblem",
                             "A built-in problem's workers, batches and gradients one by one, as "
                             "`bitlab run`'s cluster computes them.")
      .def(py::init<const py::object&>(), py::arg("experiment"),
           "Args:\n    experiment: an experiment as Python data (resolved here).\n\nRaises:\n"
           "    bitlab.ConfigError: bad input.")
      .def_property_readonly("dim", &BuiltinProblem::dim, "The number of parameters.")
      .def_property_readonly("workers", &BuiltinProblem::workers, "The number of workers.")
      .def_property_readonly("tensors", &BuiltinProblem::tensors,
                             "The tensors as dicts of name, offset, size, rows and cols.")
      .def_property_readonly("eval_columns", &BuiltinProblem::eval_columns,
                             "The names evaluate() returns values for.")
      .def("init_params", &BuiltinProblem::init_params,
           "The initial parameters.\n\nReturns:\n    numpy.ndarray: float32, the problem's "
           "initialisation for the experiment's seed.")
      .def("batch", &BuiltinProblem::batch, py::arg("worker"), py::arg("step"),
           "A worker's batch at a step.\n\nArgs:\n    worker: the worker.\n    step: the step "
           "(1-based).\n\nReturns:\n    numpy.ndarray: uint32 sample indices of its shard.")
      .def("loss_grad", &BuiltinProblem::loss_grad, py::arg("params"), py::arg("worker"),
           py::arg("step"),
           "A worker's loss and gradient, as the cluster computes them (its batch, its noise "
           "stream).\n\nArgs:\n    params: the parameters (float32).\n    worker: the worker."
           "\n    step: the step.\n\nReturns:\n    tuple[float, numpy.ndarray]: the loss and the "
           "float32 gradient.")
      .def("evaluate", &BuiltinProblem::evaluate, py::arg("params"),
           "The problem's evaluation.\n\nArgs:\n    params: the parameters (float32).\n\n"
           "Returns:\n    list[float]: one value per eval column.");
  m.def("dataset", &dataset, py::arg("problem"),
        "A real data set as the real problems see it (split, subsampled, scaled).\n\nArgs:\n"
        "    problem: the problem section (dataset, data_dir, samples, ...).\n\nReturns:\n"
        "    dict: train_x, train_y, test_x, test_y, classes, height, width.");
}

}  // namespace bitlab::python
