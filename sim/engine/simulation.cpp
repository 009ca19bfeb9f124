#include "sim/engine/simulation.hpp"

#include <limits>

#include "sim/kernels/reduce.hpp"

namespace bitlab {

Simulation::Simulation(const Experiment& experiment, Transport* transport)
    : Simulation(experiment, transport, nullptr) {}

Simulation::Simulation(const Experiment& experiment, std::unique_ptr<Problem> problem)
    : Simulation(experiment, nullptr, std::move(problem)) {}

Simulation::Simulation(const Experiment& experiment, Transport* transport,
                       std::unique_ptr<Problem> given_problem)
    : experiment_(experiment), comm_(static_cast<int>(experiment.cluster.workers), transport) {
  const auto* pe = find_entry(problem_registry(), experiment.problem.at("name").get<std::string>());
  const auto* oe =
      find_entry(optimizer_registry(), experiment.optimizer.at("name").get<std::string>());
  if (!pe || !oe) throw ConfigError("internal: experiment was not resolved");
  // Under MPI a rank holds only its workers' training samples, and only rank 0
  // (which writes the results) evaluates. The simulator holds everything.
  Transport& ranks = comm_.transport();
  evaluates_ = ranks.rank() == 0;
  DataScope scope;
  if (ranks.ranks() > 1) {
    scope.evaluates = evaluates_;
    scope.worker_samples = [this](size_t m, std::span<const int32_t> labels, int classes) {
      return samples_of_workers(
          make_shards(m, labels, classes, experiment_.cluster, experiment_.run.seed),
          comm_.local_workers());
    };
  }
  optimizer_ = oe->make(experiment.optimizer);
  // The gradients are streamed into their mean when that is all the
  // optimizer reads (memory: log n rows, not n), under MPI too (the tree's
  // nodes above the ranks' blocks are combined across them).
  // A given problem (the Python bridge's) is handed its gradients into the
  // cluster's rows, so it keeps them (problems/external.hpp).
  std::optional<StreamedMean> streamed;
  if (const auto wire = optimizer_->gradient_mean_wire(); wire && !given_problem) {
    streamed = StreamedMean{*wire, experiment.run.grad_norm_every > 0, &comm_};
  }
  timed_ = experiment.network.timed();
  if (timed_) topology_ = make_topology(experiment.network, experiment.cluster.workers);
  const int workers = static_cast<int>(experiment.cluster.workers);
  const int gpus_per_node = timed_ ? workers / topology_.nodes : 0;
  agree_on_config_errors(ranks, [&] {
    problem_ = given_problem ? std::move(given_problem) : pe->make(experiment.problem, scope);
    // What the optimizer's setup() will allocate, checked with the cluster's
    // buffers before either allocates.
    optimizer_->set_run_steps(experiment.run.steps);
    const uint64_t optimizer_bytes = optimizer_->planned_state_bytes(
        {workers, comm_.local_workers().size(), problem_->dim(), gpus_per_node});
    cluster_ = std::make_unique<Cluster>(experiment.cluster, *problem_, experiment.run.seed,
                                         comm_.local_workers(), streamed, optimizer_bytes);
  });
  if (timed_) cluster_->set_gpus_per_node(gpus_per_node);
  optimizer_->setup(*cluster_);
  if (!cluster_->streams_mean()) mean_grad_.assign(cluster_->dim(), 0.0f);
  if (timed_) {
    // Each worker's compute scales with its batch (problems without data
    // count one sample).
    compute_base_s_.resize(cluster_->workers());
    compute_s_.resize(cluster_->workers());
    for (int i = 0; i < cluster_->workers(); ++i) {
      compute_base_s_[i] = base_compute_s(experiment.compute, static_cast<double>(cluster_->dim()),
                                          compute_samples(cluster_->batch_samples(i)));
    }
    step_records_.reserve(16);
  }
}

std::vector<double> Simulation::evaluate() const {
  std::vector<double> out(problem_->eval_columns().size(),
                          std::numeric_limits<double>::quiet_NaN());
  problem_->evaluate(cluster_->params(), out);
  return out;
}

const StepMetrics& Simulation::step() {
  ++step_;
  last_.step = step_;
  compute_gradients();
  const size_t log_before = comm_.log().size();
  step_optimizer();
  count_traffic(log_before);
  price_step_time(log_before);
  evaluate_if_due();
  return last_;
}

void Simulation::compute_gradients() {
  // Every worker: loss and gradient on its batch.
  StepMetrics& m = last_;
  const int64_t every = experiment_.run.grad_norm_every;
  const bool norm_due = every > 0 && step_ % every == 0;
  if (cluster_->streams_mean()) {
    // Under MPI the streamed mean's exchange across ranks (the optimizer's
    // allreduce, folded into the gradients' computation) happens here: its
    // seconds count with the optimizer's exchanges.
    const TransportStats before = comm_.transport().stats();
    cluster_->compute_gradient_mean(step_, norm_due);
    streamed_transport_ = stats_since(comm_.transport().stats(), before);
  } else {
    cluster_->compute_gradients(step_);
  }
  problem_->check_gradients(step_);
  // Under MPI every rank needs every worker's loss (8 bytes each) for the
  // same tree mean.
  comm_.share_rows(cluster_->losses().data(), sizeof(double));
  m.train_loss = tree_mean(cluster_->losses());
  if (norm_due) {
    // A measurement of the simulator, not traffic: no CommRecord. A streamed
    // cluster folded the same fp32 mean while computing the gradients.
    if (cluster_->streams_mean()) {
      m.grad_norm = norm2(cluster_->streamed_mean(WireDtype::kFp32));
    } else {
      comm_.exact_mean(cluster_->grads(), mean_grad_, WireDtype::kFp32);
      m.grad_norm = norm2(mean_grad_);
    }
  } else {
    m.grad_norm = std::numeric_limits<double>::quiet_NaN();
  }
}

void Simulation::step_optimizer() {
  // Every byte the optimizer moves is logged by the communicator.
  comm_.begin_step(step_);
  StepContext ctx{step_, *cluster_, comm_};
  const TransportStats before = comm_.transport().stats();
  optimizer_->step(ctx);
  const TransportStats own = stats_since(comm_.transport().stats(), before);
  last_.transport_s = streamed_transport_.seconds + own.seconds;
  last_.transport_wait_s = streamed_transport_.wait_seconds + own.wait_seconds;
  streamed_transport_ = {};
  last_.phase = optimizer_->phase();
}

void Simulation::count_traffic(size_t log_before) {
  StepMetrics& m = last_;
  m.bytes_sent = 0.0;
  m.messages = 0;
  const auto& recs = comm_.log().records();
  for (size_t k = log_before; k < recs.size(); ++k) {
    m.bytes_sent += recs[k].sent_bytes;
    m.messages += recs[k].messages;
  }
  bytes_cum_ += m.bytes_sent;
  messages_cum_ += m.messages;
  m.bytes_sent_cum = bytes_cum_;
  m.messages_cum = messages_cum_;
}

void Simulation::price_step_time(size_t log_before) {
  StepMetrics& m = last_;
  if (!timed_) {
    m.compute_s = m.comm_s = m.step_s = m.sim_time_s = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  const auto& recs = comm_.log().records();
  step_records_.assign(recs.begin() + static_cast<ptrdiff_t>(log_before), recs.end());
  if (next_compute_s_.empty()) {
    worker_compute_s(experiment_.compute, compute_base_s_, experiment_.run.seed, step_, compute_s_);
  } else {
    compute_s_.swap(next_compute_s_);
    next_compute_s_.clear();
  }
  const StepTime st = price_step(step_records_, topology_, compute_s_, experiment_.compute);
  m.compute_s = st.compute_s;
  m.comm_s = st.comm_s;
  m.step_s = st.step_s;
  sim_time_s_ += st.step_s;
  m.sim_time_s = sim_time_s_;
}

void Simulation::set_next_compute_s(std::vector<double> seconds) {
  if (seconds.size() != static_cast<size_t>(cluster_->workers())) {
    throw ConfigError("set_next_compute_s: " + std::to_string(seconds.size()) +
                      " values for " + std::to_string(cluster_->workers()) + " workers");
  }
  next_compute_s_ = std::move(seconds);
}

void Simulation::evaluate_if_due() {
  // Evaluation when due, and always after the last step.
  const auto& run = experiment_.run;
  const bool due = (run.eval_every > 0 && step_ % run.eval_every == 0) || step_ == run.steps;
  if (due && evaluates_) {
    last_.eval = evaluate();
  } else {
    last_.eval.clear();
  }
}

void Simulation::serialize(StateArchive& io) {
  io.field("simulation.step", step_);
  io.field("simulation.sim_time_s", sim_time_s_);
  io.field("simulation.bytes_cum", bytes_cum_);
  io.field("simulation.messages_cum", messages_cum_);
  uint64_t collectives_done = collectives();
  io.field("simulation.collectives", collectives_done);
  if (io.loading()) collectives_before_ = collectives_done;  // this log starts empty
  cluster_->serialize(io);
  optimizer_->serialize(io);
}

}  // namespace bitlab
