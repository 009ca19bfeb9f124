// BridgeRun: the C++ half of bitlab.torch.Simulation (python/bitlab/torch.py).
// A RunSession (sim/engine/run.hpp) over an ExternalProblem
// (problems/external.hpp), driven through the simulation's per-worker path:
// begin_step() before a step's first worker, take_gradient() as each worker's
// block ends, step() after the last. Simulation::take_gradient reads the
// worker's .grad buffers once (bitlab.torch keeps them alive until the take is
// done): into the gradients' mean tree directly, or gathered into one
// contiguous row first (the worker's own row for the optimizers that read
// per-worker gradients; a staging row the optimizer's take_gradient reads,
// for the 1-bit family's compressed steps). The take runs on the caller's
// thread, or on a thread of its own (BackgroundTaker) while torch computes the
// next worker. The model's parameters are numpy views of the cluster's own
// (no copy either way).
// Checks of what Python hands in (shapes, dtypes, devices, the worker
// protocol) live on the Python side, where the user's names are; this side
// checks only that the values are finite (in the same pass).
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <omp.h>

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "problems/external.hpp"
#include "python/src/bindings.hpp"
#include "sim/collectives/powersgd.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/run.hpp"
#include "sim/comm/transport.hpp"
#include "sim/engine/simulation.hpp"

namespace py = pybind11;

namespace bitlab::python {

namespace {

// The MPI transport of this process, made on the first MPI bridge run and
// kept to the interpreter's exit (MPI cannot be initialised twice): later
// Simulations in the same script use it too. Finalized at exit (atexit,
// registered when the module loads).
std::unique_ptr<Transport>& process_transport() {
  static std::unique_ptr<Transport> transport;
  return transport;
}

Transport* mpi_transport() {
  auto& t = process_transport();
  if (!t) t = make_mpi_transport();
  return t.get();
}

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

// Runs each worker's take on a thread of its own, in the order posted, while
// the caller's thread goes on to the next worker's forward and backward in
// torch (which leaves a core idle when it runs fewer threads than the
// machine has; docs/building.md, "The Python bridge"). One take in flight at
// a time: post() first waits for the one before, so the takes run in the
// workers' exit order, one after another, as if taken inline (the same bits).
// The take runs one OpenMP thread (its own ICV), beside torch's.
class BackgroundTaker {
 public:
  BackgroundTaker() = default;
  BackgroundTaker(const BackgroundTaker&) = delete;
  BackgroundTaker& operator=(const BackgroundTaker&) = delete;
  ~BackgroundTaker() {
    {
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return !busy_; });
      stop_ = true;
    }
    ready_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Waits for the take in flight; rethrows what it threw (failed_worker()
  // then names its worker).
  void wait() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }
  void post(int worker, std::function<void()> job) {
    wait();
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    {
      std::lock_guard lock(mutex_);
      job_ = std::move(job);
      worker_ = worker;
      busy_ = true;
    }
    ready_.notify_one();
  }
  int failed_worker() const { return failed_; }

 private:
  void loop() {
    omp_set_num_threads(1);
    std::unique_lock lock(mutex_);
    while (true) {
      ready_.wait(lock, [this] { return busy_ || stop_; });
      if (!busy_) return;
      lock.unlock();
      std::exception_ptr error;
      try {
        job_();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error) {
        error_ = error;
        failed_ = worker_;
      }
      busy_ = false;
      done_.notify_all();
    }
  }
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable ready_, done_;
  std::function<void()> job_;
  bool busy_ = false, stop_ = false;
  int worker_ = -1, failed_ = -1;
  std::exception_ptr error_;
};

class BridgeRun {
 public:
  // `experiment`: resolved (bitlab.resolve); None with options.resume. `mpi`:
  // this process is one rank of an MPI job (mpirun, srun). `background_take`:
  // take each gradient on a thread of its own (BackgroundTaker) while torch
  // computes the next worker, when torch leaves a core idle (bitlab.torch
  // decides); else inline.
  BridgeRun(const Experiment* experiment, py::array_t<float, py::array::c_style> initial,
            std::vector<std::string> eval_columns, py::object evaluate, RunOptions o, bool mpi,
            bool background_take)
      : evaluate_(std::move(evaluate)), background_(background_take) {
    o.print_dir = false;
    o.command_line = "bitlab.torch.Simulation (Python)";
    if (mpi) o.transport = mpi_transport();
    if (!o.resume && experiment == nullptr) {
      throw ConfigError("BridgeRun: give an experiment, or options.resume with options.out_dir");
    }
    const Experiment e = o.resume ? experiment_to_resume(o) : *experiment;
    say_setting_warnings_when_quiet(e, o);
    std::vector<float> x0(initial.data(), initial.data() + initial.size());
    if (o.transport != nullptr) {
      // Every rank starts from rank 0's parameters (each process built its
      // own model; a script that seeds torch differently per rank still runs
      // the one model).
      o.transport->broadcast(reinterpret_cast<uint8_t*>(x0.data()),
                             static_cast<int64_t>(x0.size() * sizeof(float)), 0);
    }
    auto problem = std::make_unique<ExternalProblem>(external_options(e), std::move(x0));
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

  void begin_step() {
    wait();
    session_->simulation().begin_step();
  }

  // Waits for the take in flight (the GIL released meanwhile); rethrows its
  // error (failed_worker names the worker).
  void wait() {
    py::gil_scoped_release release;
    taker_.wait();
  }
  int failed_worker() const {
    return failed_inline_ >= 0 ? failed_inline_ : taker_.failed_worker();
  }

  // The gradients' mean of the last step as the optimizer read it (a float32
  // array over the cluster's memory, valid until the next step; None when
  // the optimizer reads per-worker rows or took the gradients itself): what
  // tests/bench/bench_bridge.py checks against torch's own gradients.
  static py::object gradient_mean(py::object self_obj) {
    BridgeRun& self = self_obj.cast<BridgeRun&>();
    Simulation& sim = self.session_->simulation();
    const auto wire = sim.optimizer().gradient_mean_wire();
    if (!wire || !sim.cluster().streams_mean() || sim.steps_done() == 0) return py::none();
    try {
      const std::span<const float> g = sim.cluster().streamed_mean(*wire);
      return py::array_t<float>({static_cast<py::ssize_t>(g.size())}, {sizeof(float)}, g.data(),
                                self_obj);
    } catch (const std::logic_error&) {
      return py::none();  // this step folded no mean (the optimizer took the gradients)
    }
  }

  // Worker w's gradient: `data[k]` is the address of tensor k's .grad
  // (contiguous float32 of the tensor's size, kept alive by the caller for
  // the call). NaN `loss`: not measured.
  // The take runs in the background (BackgroundTaker): the caller keeps the
  // buffers alive until the next take_gradient, wait() or step() returns.
  // Throws what the previous take threw.
  void take_gradient(int worker, const std::vector<uintptr_t>& data, std::optional<double> loss) {
    std::vector<const float*> ptrs;
    ptrs.reserve(data.size());
    for (const uintptr_t p : data) ptrs.push_back(reinterpret_cast<const float*>(p));
    const double value = loss.value_or(std::nan(""));
    auto take = [this, worker, ptrs = std::move(ptrs), value] {
      const auto start = std::chrono::steady_clock::now();
      session_->simulation().take_gradient(worker, ptrs, value);
      take_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (!background_) {
      try {
        take();
      } catch (...) {
        failed_inline_ = worker;
        throw;
      }
      return;
    }
    py::gil_scoped_release release;
    taker_.post(worker, std::move(take));
  }

  bool step(std::optional<std::vector<double>> compute_s) {
    wait();
    if (compute_s) session_->simulation().set_next_compute_s(std::move(*compute_s));
    return session_->step();
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
  // Seconds spent in take_gradient since the start: what the bridge adds to
  // torch's forward and backward (tests/bench/bench_bridge.py reports it).
  double take_seconds() {
    wait();
    return take_s_;
  }

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
  double take_s_ = 0.0;   // written by the taker's thread, read after wait()
  bool background_ = false;
  int failed_inline_ = -1;
  std::unique_ptr<RunSession> session_;
  BackgroundTaker taker_;  // destroyed first: no take outlives the session
};

// PowerSGD's hooks (sim/collectives/powersgd.hpp): the gradient order and
// torch's random start, called with the GIL for each draw.
bool set_powersgd_hooks(BridgeRun& b, std::vector<int> ready_order, py::object random_start) {
  PowerSgdExchange* x = b.session().simulation().optimizer().powersgd_exchange();
  if (x == nullptr) return false;
  x->set_ready_order(std::move(ready_order));
  const int64_t seed = x->random_seed();
  x->set_random_start([random_start, seed](int64_t draw, const PowerSgdBucket& bucket,
                                           std::span<float> q) {
    py::gil_scoped_acquire gil;
    py::list shapes;
    for (const auto& s : bucket.draw_shapes) shapes.append(py::make_tuple(s[0], s[1], s[2]));
    const auto drawn =
        random_start(seed, draw, shapes).cast<py::array_t<float, py::array::c_style | py::array::forcecast>>();
    if (static_cast<size_t>(drawn.size()) != q.size()) {
      throw std::runtime_error("PowerSGD random start: " + std::to_string(drawn.size()) +
                               " values for a Q of " + std::to_string(q.size()));
    }
    std::copy_n(drawn.data(), q.size(), q.begin());
  });
  return true;
}

}  // namespace

namespace {
void def_bridge_steps(py::class_<BridgeRun>& run);
void def_bridge_state(py::class_<BridgeRun>& run);
}  // namespace

void bind_bridge(py::module_& m) {
  m.add_object("_release_transport", py::cpp_function([] { process_transport().reset(); }));
  py::module_::import("atexit").attr("register")(m.attr("_release_transport"));
  py::class_<BridgeRun> run(m, "BridgeRun", R"doc(One run driven a step at a time from Python: what bitlab.torch.Simulation drives.

A RunSession over the model's tensors (problem "external"): the usual results
folder, checkpoints, divergence check and summary; the caller decides when
each step happens, after handing in every worker's gradients.
)doc");
  def_bridge_steps(run);
  def_bridge_state(run);
}

namespace {

// BridgeRun's construction and step protocol.
void def_bridge_steps(py::class_<BridgeRun>& run) {
  run.def(py::init<const Experiment*, py::array_t<float, py::array::c_style>,
                    std::vector<std::string>, py::object, RunOptions, bool, bool>(),
           py::arg("experiment"), py::arg("initial"), py::arg("eval_columns"),
           py::arg("evaluate"), py::arg("options"), py::kw_only(), py::arg("mpi") = false,
           py::arg("background_take") = false,
           R"doc(Builds the run, its results folder and its files.

Args:
    experiment: the resolved Experiment (problem "external"); None with
        options.resume.
    initial: the model's parameters, flattened (float32, tensor order).
    eval_columns: the names evaluate() returns values for, in order.
    evaluate: called at every evaluation; returns a list of floats, or None.
    options: the RunOptions (options.resume continues options.out_dir).
    mpi: this process is one rank of an MPI job (mpirun, srun).
    background_take: take each gradient on a thread of its own.

Raises:
    bitlab.ConfigError: bad input, before the results folder exists.
)doc")
      .def("params", [](py::object self) { return BridgeRun::params_view(self, -1); },
           "The synchronised parameters.\n\nReturns:\n    numpy.ndarray: float32, a view of "
           "bitlab's own memory (no copy).")
      .def("local_params",
           [](py::object self, int worker) { return BridgeRun::params_view(self, worker); },
           py::arg("worker"),
           "A worker's own parameters (0/1 Adam's local steps).\n\nArgs:\n    worker: the "
           "worker.\n\nReturns:\n    numpy.ndarray | None: a float32 view, or None while the "
           "worker reads the shared ones.")
      .def("begin_step", &BridgeRun::begin_step,
           "Starts a step: call before the step's first worker hands in its gradients.")
      .def("wait", &BridgeRun::wait,
           "Waits for the gradient being taken in the background.\n\nRaises:\n    "
           "bitlab.GradientError: the take refused a gradient (not finite).")
      .def_property_readonly("failed_worker", &BridgeRun::failed_worker,
                             "The worker whose take failed, -1 when none did.")
      .def("gradient_mean", [](py::object self) { return BridgeRun::gradient_mean(self); },
           "The gradients' mean of the last step as the optimizer read it.\n\nReturns:\n    "
           "numpy.ndarray | None: a float32 view valid until the next step; None when the "
           "optimizer read per-worker rows or took the gradients itself.")
      .def("take_gradient", &BridgeRun::take_gradient, py::arg("worker"), py::arg("data"),
           py::arg("loss"),
           R"doc(Hands in a worker's gradients.

Args:
    worker: the worker.
    data: the address of each tensor's .grad (contiguous float32 of the
        tensor's size), kept alive by the caller until the take is done.
    loss: the worker's batch loss, None when not measured.

Raises:
    bitlab.GradientError: the previous or this take found an element that is
        not finite (worker, field: the parameter, element).
)doc")
      .def("step", &BridgeRun::step, py::arg("compute_s") = py::none(),
           R"doc(Finishes the step: the optimizer, its exchanges, the step's rows.

Args:
    compute_s: each worker's measured compute seconds, or None for the
        experiment's compute model.

Returns:
    bool: False once the run has ended (its last step, a divergence, a failed write).
)doc")
      .def(
          "finish",
          [](BridgeRun& b) {
            b.wait();  // a failed take is the caller's to report first (bitlab.torch does)
            return b.session().finish();
          },
          "Writes summary.json and the report.\n\nReturns:\n    int: the exit status, as "
          "`bitlab run`'s.")
      .def(
          "fail",
          [](BridgeRun& b, const std::string& why) {
            try {
              b.wait();
            } catch (...) {
              // already failing: this run's reason is `why`
            }
            return b.session().fail(why);
          },
          py::arg("why"),
          "Ends the run as \"failed\".\n\nArgs:\n    why: the reason summary.json gives.\n\n"
          "Returns:\n    int: the exit status (4).")
      .def(
          "warn", [](BridgeRun& b, const std::string& text) { b.session().warn(text); },
          py::arg("text"),
          "Says a warning on stderr (unless quiet) and keeps it in summary.json.\n\nArgs:\n    "
          "text: the warning.")

;
}

// What a BridgeRun tells about itself.
void def_bridge_state(py::class_<BridgeRun>& run) {
  run.def("set_powersgd_hooks", &set_powersgd_hooks, py::arg("ready_order"),
           py::arg("random_start"),
           R"doc(Hands a PowerSGD exchange the model's gradient order and torch's random start.

Args:
    ready_order: tensor indices, as the first backward produced them.
    random_start: random_start(seed, draw, shapes) returns Q's random start as
        torch's powerSGD_hook draws it (a float32 array).

Returns:
    bool: False when the optimizer's gradient_exchange is not powersgd.
)doc")
      .def_property_readonly("tensors", &BridgeRun::tensors,
                             "The model's tensors as dicts of name, offset and size.")
      // bitlab's own estimate of the run's memory (Cluster::memory_estimate, what the memory
      // check before the run compares with the machine's): bitlab.torch reports it.
      .def_property_readonly(
          "memory_estimate",
          [](BridgeRun& b) { return b.session().simulation().cluster().memory_estimate(); },
          "bitlab's estimate of the run's memory in bytes (what the memory check compares).")
      .def_property_readonly("take_seconds", &BridgeRun::take_seconds,
                             "Seconds spent taking gradients since the start.")
      .def_property_readonly(
          "dir", [](BridgeRun& b) { return b.session().dir(); }, "The results folder.")
      .def_property_readonly(
          "status",
          [](BridgeRun& b) { return std::string(run_status_name(b.session().status())); },
          "\"completed\" (also while it steps), \"diverged\", \"interrupted\" or \"failed\".")
      .def_property_readonly(
          "failure", [](BridgeRun& b) { return b.session().failure(); },
          "Why the run failed; \"\" otherwise.")
      .def_property_readonly(
          "ended", [](BridgeRun& b) { return b.session().ended(); },
          "Whether the run has ended (only finish() is left).")
      .def_property_readonly(
          "finished", [](BridgeRun& b) { return b.session().finished(); },
          "Whether finish() or fail() has run.")
      .def_property_readonly(
          "local_workers",
          [](BridgeRun& b) {
            const WorkerRange r = b.session().simulation().comm().local_workers();
            return std::make_pair(r.begin, r.end);
          },
          "(first, end) of the workers this process computes.")
      .def_property_readonly(
          "rank", [](BridgeRun& b) { return b.session().simulation().comm().transport().rank(); },
          "This process's rank (0 without MPI).")
      .def_property_readonly(
          "ranks",
          [](BridgeRun& b) { return b.session().simulation().comm().transport().ranks(); },
          "The number of ranks (1 without MPI).")
      .def_property_readonly(
          "steps_done", [](BridgeRun& b) { return b.session().simulation().steps_done(); },
          "Steps finished so far.")
      .def_property_readonly(
          "config",
          [](BridgeRun& b) { return to_python(b.session().simulation().experiment().resolved); },
          "The run's resolved experiment as a dict (config.json).");
}


}  // namespace

}  // namespace bitlab::python
