// The step loop as a library (docs/design.md "The way data flows"):
//   1. optimizer.begin_step(), then every worker: loss + gradient on its
//      batch (parallel), each handed to the optimizer (take_gradient) or
//      folded into the gradients' mean as it is made
//   2. optimizer.finish_step(): the communicator does the math of each
//      collective and records it in the CommLog
//   3. a metrics row (StepMetrics), evaluation when due
// A problem whose gradients are made outside (the Python bridge) drives step
// 1 itself: begin_step(), take_gradient() per worker, then step().
// Tests and benchmarks drive Simulation step by step; run_experiment()
// (sim/engine/run.hpp) adds the results folder, progress and signals.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/engine/config.hpp"
#include "sim/kernels/worker_intake.hpp"
#include "sim/timing/network.hpp"

namespace bitlab {

// One row of metrics.csv. NaN marks "not measured at this step".
struct StepMetrics {
  int64_t step = 0;
  const char* phase = "";
  double train_loss = 0.0;      // tree mean of the workers' batch losses
  double grad_norm = 0.0;       // ‖mean_i g_i‖ (NaN when not measured)
  std::vector<double> eval;     // problem's eval columns; empty when not an eval step
  double bytes_sent = 0.0;      // per worker, this step
  double bytes_sent_cum = 0.0;  // per worker, since step 1
  int64_t messages = 0;         // message rounds per worker, this step
  int64_t messages_cum = 0;
  // Simulated time (network model; NaN without one).
  double compute_s = 0.0, comm_s = 0.0, step_s = 0.0, sim_time_s = 0.0;
  double wall_s = 0.0;  // wall time since the run started (not deterministic)
  // MPI backend: seconds this rank spent in the transport's moving calls
  // during the optimizer's exchanges, the streamed mean's exchange across
  // ranks included (the measured counterpart of comm_s; not deterministic,
  // never in metrics.csv).
  double transport_s = 0.0;
  // With a barrier before each exchange (--barrier-before-exchanges): the
  // seconds spent in those barriers, waiting for the slowest rank.
  double transport_wait_s = 0.0;
};

class Simulation {
 public:
  // `transport`: nullptr (or one rank) = the simulator; an MPI transport makes
  // this process one rank of the MPI backend, computing its block of workers.
  explicit Simulation(const Experiment& experiment, Transport* transport = nullptr);
  // With `problem` in place of the one the registry would build from
  // experiment.problem (the Python bridge's ExternalProblem, whose data the
  // experiment cannot hold). The simulator only (no transport).
  Simulation(const Experiment& experiment, std::unique_ptr<Problem> problem);
  // The same as one rank of the MPI backend (`transport`; nullptr: the
  // simulator): a problem whose gradients are handed in takes this rank's
  // workers only (comm().local_workers()).
  Simulation(const Experiment& experiment, Transport* transport, std::unique_ptr<Problem> problem);

  // Runs one step and returns its metrics (eval filled when due). With a
  // problem whose gradients are handed in, finishes the step that
  // begin_step() began, once every local worker's gradient was taken.
  const StepMetrics& step();

  // The per-worker path for a problem whose gradients are made outside
  // bitlab (Problem::gradients_handed_in, the Python bridge): begin_step()
  // before the step's first worker runs (an optimizer may give the workers
  // parameters of their own here: 0/1 Adam's local steps), take_gradient()
  // for every local worker once, in any order, then step(). Each gradient
  // (`pieces`: the tensors' buffers, problem tensor order) is read once,
  // straight into the optimizer's worker stage, the gradients' mean or the
  // worker's row (what the optimizer reads, as in `bitlab run`), with the
  // finiteness check in the same pass. A gradient with an element that is
  // not finite throws ConfigError naming step, worker, tensor and element
  // (field: the tensor); the step cannot be finished then. `loss`: NaN
  // when not measured (train_loss is then NaN). Not thread-safe.
  void begin_step();
  void take_gradient(int worker, std::span<const float* const> pieces, double loss);
  bool handed_in() const { return handed_; }
  // Whether every worker's loss of the last step was measured (handed in;
  // always true for a problem that computes its own).
  bool losses_measured() const { return losses_measured_; }
  int64_t steps_done() const { return step_; }
  const Experiment& experiment() const { return experiment_; }
  const Problem& problem() const { return *problem_; }
  Cluster& cluster() { return *cluster_; }
  Communicator& comm() { return comm_; }
  Optimizer& optimizer() { return *optimizer_; }
  std::vector<std::string> eval_columns() const { return problem_->eval_columns(); }
  // Evaluates the synchronised parameters now (rank 0 only under MPI: the
  // other ranks hold no held-out data).
  std::vector<double> evaluate() const;
  bool evaluates() const { return evaluates_; }
  // Collectives logged since step 1 (a resumed run counts those of the steps
  // before its checkpoint too).
  size_t collectives() const { return collectives_before_ + comm_.log().size(); }
  // Saves or loads everything the next step depends on: the step count and
  // running totals, the parameters, the optimizer's state (a checkpoint,
  // docs/results.md "Checkpoints"). Every random stream is drawn from (seed,
  // step, worker), so no generator position needs saving.
  void serialize(StateArchive& io);

  // The next step's per-worker compute seconds, in place of the compute
  // model's (the Python bridge's measured forward and backward time). One
  // value per worker; used once.
  void set_next_compute_s(std::vector<double> seconds);

  // The network model's topology, or nullptr without one.
  const Topology* topology() const { return timed_ ? &topology_ : nullptr; }

 private:
  // The parts of step(), in order; each fills its fields of last_.
  void compute_gradients();
  // Whether step t measures the grad_norm metric (run.grad_norm_every).
  bool grad_norm_due(int64_t t) const;
  void check_handed_ready() const;
  void finish_handed_gradients();
  [[noreturn]] void throw_non_finite(int worker) const;
  void step_optimizer();
  void count_traffic(size_t log_before);
  void price_step_time(size_t log_before);
  void evaluate_if_due();

  Experiment experiment_;
  std::unique_ptr<Problem> problem_;
  std::unique_ptr<Cluster> cluster_;
  Communicator comm_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<float> mean_grad_;
  // The transport's counts while the streamed mean was folded this step (its
  // exchange across ranks), added to StepMetrics::transport_s and _wait_s.
  TransportStats streamed_transport_;
  bool timed_ = false;
  // The handed-in path (begin_step / take_gradient).
  bool handed_ = false;
  bool began_ = false;         // begin_step() called for step_ + 1
  bool optimizer_takes_ = false;  // this step's gradients go to the optimizer
  bool take_failed_ = false;
  bool losses_measured_ = true;
  int taken_ = 0;
  std::vector<char> worker_taken_;
  std::vector<RowPiece> pieces_;
  std::vector<float> take_row_;  // one row, for the optimizer's take_gradient
  bool evaluates_ = true;
  Topology topology_;
  std::vector<double> compute_base_s_, compute_s_;
  std::vector<double> next_compute_s_;  // set_next_compute_s, for one step
  std::vector<CommRecord> step_records_;
  double sim_time_s_ = 0.0;
  int64_t step_ = 0;
  double bytes_cum_ = 0.0;
  int64_t messages_cum_ = 0;
  uint64_t collectives_before_ = 0;  // logged before a resume
  StepMetrics last_;
};

}  // namespace bitlab
