// The optimizer interface. An optimizer reads the workers' gradients, moves
// data between workers only through the Communicator (which counts the
// bytes), and updates the parameters. It never prices communication.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/comm/comm_plan.hpp"
#include "sim/core/registry.hpp"
#include "sim/core/state_archive.hpp"

namespace bitlab {

class Optimizer;
class PowerSgdExchange;

// What an optimizer declares about its uncompressed twin, for a fair
// comparison (docs/results.md "A twin baseline"): the optimizer `name` (its
// own name for "the same with compression off"), which takes every option of
// the resolved optimizer that it also has, then `set` on top. An empty name
// says there is none, and `why_none` says why (it does not compress, or its
// update is the compression). Each optimizer's options struct declares it:
//   static TwinDeclaration twin(const Json& resolved);
// and twin_optimizer() reads it from the registry entry, so a new optimizer
// edits nothing else.
struct TwinDeclaration {
  std::string name;
  Json set = Json::object();
  std::string why_none;
};

// An optimizer's registry entry carries its twin declaration.
template <>
struct EntryExtras<Optimizer> {
  std::function<TwinDeclaration(const Json& resolved)> twin;
  template <class Options>
  static EntryExtras from() {
    return {[](const Json& resolved) { return Options::twin(resolved); }};
  }
};

// The declaration of an optimizer that does not compress: it is its own
// baseline.
inline TwinDeclaration uncompressed_twin(const Json& resolved) {
  return {"", Json::object(),
          resolved.value("name", std::string("this optimizer")) +
              " does not compress: it is its own baseline"};
}

struct StepContext {
  int64_t step;  // 1-based
  Cluster& cluster;
  Communicator& comm;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // The run's number of steps, told by the simulation before
  // planned_state_bytes() and setup() (never told, or 0: not known). An
  // optimizer whose state depends on its schedule sizes it from this: 0/1
  // Adam holds per-worker parameters, momenta and updates only when a local
  // step falls within the run.
  virtual void set_run_steps(int64_t /*steps*/) {}
  // Called once before the first step: allocate all state here, so that
  // step() does not allocate.
  virtual void setup(Cluster& cluster) = 0;
  // One step is three calls (docs/design.md, "One step in three calls"):
  //
  //   begin_step(t)             before step t's gradients are made
  //   take_gradient(w, g_w)     each local worker's gradient, as it is made
  //   finish_step(ctx)          the exchange and the update
  //
  // begin_step says whether this step's gradients come to take_gradient
  // (true: 1-bit Adam's compressed steps fold m_i = β1 m + (1−β1) g_i
  // straight into the compressed allreduce's worker stage) or go to the
  // gradients' mean, which finish_step reads through allreduce_gradients
  // (optimizers/common.hpp). The cluster of `bitlab run` and the Python
  // bridge both drive these calls, each worker's gradient handed over once,
  // in any worker order, distinct workers concurrently from the cluster's
  // threads (the bits do not depend on the order: the worker stage and the
  // mean's tree are fixed by worker index). Called only where the workers'
  // gradients come one by one (a streamed cluster, gradient_mean_wire());
  // on a cluster that holds every row (cluster.grads(), the optimizers that
  // read per-worker gradients), begin_step is not called and finish_step
  // reads the rows.
  virtual bool begin_step(int64_t /*step*/) { return false; }
  virtual void take_gradient(int worker, std::span<const float> g);
  virtual void finish_step(StepContext& ctx) = 0;
  // The wire type when every step reads the workers' gradients only through
  // allreduce_gradients (optimizers/common.hpp) in that wire: the simulator
  // then streams each worker's gradient into the mean as it is computed and
  // never holds the n × d gradient rows (StreamedMean, sim/cluster). nullopt
  // (the default) for optimizers that read per-worker gradients. Known from
  // the options alone: asked before setup().
  virtual std::optional<WireDtype> gradient_mean_wire() const { return std::nullopt; }
  // Bytes setup() will allocate (moments, per-worker rows, the collectives'
  // buffers), known before anything is allocated: the memory check adds it
  // to the cluster's buffers (docs/experiments.md, "Memory"). Each optimizer
  // lists its buffers; the `alloc` suite checks the figure against what
  // setup() allocates. 0: unknown (a plug-in's default).
  struct StateShape {
    int workers = 1;
    int resident = 1;        // workers this process holds (all in the simulator)
    size_t dim = 0;          // parameters
    int gpus_per_node = 0;   // the network's (Cluster::gpus_per_node), 0: one node
    const std::vector<TensorInfo>* tensors = nullptr;  // the problem's layout (null: unknown)
  };
  virtual uint64_t planned_state_bytes(const StateShape& /*shape*/) const { return 0; }
  // Phase of the last step (algorithm-specific; the baselines are "full").
  virtual const char* phase() const { return "full"; }
  // Bytes of per-worker state (one row per worker) this process holds, the
  // rows of the compressed collectives it owns included (each optimizer says
  // what it counts): under the MPI backend every optimizer holds its rank's
  // block of workers only. 0 for optimizers with shared state only.
  virtual size_t held_worker_state_bytes() const { return 0; }
  // The records one step of each phase logs and how many of shape.steps steps
  // each phase takes, for shape.params parameters on shape.workers workers,
  // without training (sim/comm/comm_plan.hpp): what `bitlab cost` prices. Built
  // from the closed forms the collectives log with, so it equals what a run
  // logs (the `cost` test checks every registered optimizer). Throws
  // ConfigError for options only the cluster size can reject, as setup() does.
  virtual CommPlan comm_plan(const PlanShape& shape) const = 0;
  // Saves or loads (io.loading()) everything the next step reads that an
  // earlier step wrote: moments, error-feedback buffers, phase, counters
  // (sim/core/state_archive.hpp). Called after setup(). The default refuses:
  // an optimizer that does not list its state cannot be checkpointed.
  virtual void serialize(StateArchive& io);
  // Settings that are legal but likely mistakes in a run of `steps` steps (a
  // warm-up as long as the run, none at all): said once before the run and
  // kept in summary.json's "warnings".
  virtual std::vector<std::string> warnings(int64_t steps) const;
  // Warnings only the run can show (at the switch to compression, say), in
  // the order they arose.
  virtual const std::vector<std::string>& run_warnings() const;
  // What the optimizer's state shows that likely made the run diverge, with
  // the numbers ("2.7 % of the coordinates had sqrt(v) < eps = 1e-08 ..."),
  // or "" when nothing stands out: put first in summary.json's divergence
  // hint. Computed from the state when asked (deterministic, no extra state).
  virtual std::string divergence_cause() const { return ""; }
  // The PowerSGD exchange when the optimizer's gradient_exchange is powersgd
  // (after setup()), else null: the Python bridge hands it the model's
  // gradient order and torch's random starts (sim/collectives/powersgd.hpp).
  virtual PowerSgdExchange* powersgd_exchange() { return nullptr; }
};

// Every optimizer `bitlab` knows by name (optimizers/optimizer_registry.cpp), then those
// added with add_optimizer, in that order.
const std::vector<RegistryEntry<Optimizer>>& optimizer_registry();
// Registers one more optimizer (a plug-in, or a test's throw-away one): from
// then on `list`, `run` and `cost` know it. Throws std::invalid_argument for a
// name already taken. Not thread-safe: call before any run starts.
void add_optimizer(RegistryEntry<Optimizer> entry);
// The uncompressed twin of a resolved optimizer, as its options struct
// declares it (TwinDeclaration above), resolved. `optimizer` is null when
// there is none, and `why_none` says why.
struct Twin {
  Json optimizer;
  std::string why_none;
};
Twin twin_optimizer(const Json& resolved);

// The optimizer the papers measure speed-ups against: Adam, with an
// uncompressed gradient allreduce. `bitlab cost` prices it beside every job.
const RegistryEntry<Optimizer>& baseline_optimizer();

}  // namespace bitlab
