#include "sim/engine/simulation.hpp"

#include "sim/engine/gradient_error.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>

#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/kernels/reduce.hpp"

namespace bitlab {

namespace {

// The 1-bit allreduce pads d to a multiple of n·lcm(n, 8) by default (the
// reference's padding, sim/collectives/onebit_allreduce.hpp), 16x a small
// model at 4096 workers; a memory refusal caused by that padding (or by a
// large optimizer.pad_multiple) names it and the fix, not cluster.workers.
[[noreturn]] void rethrow_blaming_padding(const ConfigError& e, const Json& optimizer, size_t dim,
                                          int workers) {
  if (!optimizer.contains("pad_multiple") || optimizer.value("compression", "") == "none" ||
      dim == 0 || workers < 1) {
    throw e;
  }
  const Json& given = optimizer["pad_multiple"];
  const uint64_t multiple = given.is_number_unsigned() || given.is_number_integer()
                                ? given.get<uint64_t>()
                                : 0;
  const uint64_t m = multiple ? multiple : onebit_reference_pad_multiple(workers);
  const long double padded = std::ceil(static_cast<long double>(dim) / m) * m;
  const long double factor = padded / static_cast<long double>(dim);
  if (factor < 2) throw e;
  char buf[64], padded_text[64];
  std::snprintf(buf, sizeof buf, "%.3Lg", factor);
  std::snprintf(padded_text, sizeof padded_text, "%.0Lf", padded);
  const uint64_t fix = 8 * static_cast<uint64_t>(workers);
  throw ConfigError(
      std::string("optimizer.pad_multiple = ") + std::to_string(multiple) +
          (multiple ? "" : " (the reference's padding, n*lcm(n, 8) = " + std::to_string(m) + ")") +
          " pads d = " + std::to_string(dim) + " parameters to " +
          padded_text + " (" + buf +
          "x) in the 1-bit allreduce's buffers, which makes the run too large: set "
          "optimizer.pad_multiple = 8*n = " + std::to_string(fix) +
          " (the smallest that keeps the chunks whole bytes); the memory check said: " + e.what(),
      "optimizer.pad_multiple");
}

}  // namespace

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
  // nodes above the ranks' blocks are combined across them). A problem whose
  // gradients are handed in (the Python bridge's) streams them the same way,
  // one worker at a time (begin_step / take_gradient). Any other given
  // problem (the tests' simulation_with_rows) keeps every worker's row.
  handed_ = given_problem && given_problem->gradients_handed_in();
  std::optional<StreamedMean> streamed;
  if (const auto wire = optimizer_->gradient_mean_wire(); wire && (!given_problem || handed_)) {
    streamed = StreamedMean{*wire, experiment.run.grad_norm_every > 0, &comm_};
    streamed->handed = handed_;
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
        {workers, comm_.local_workers().size(), problem_->dim(), gpus_per_node,
         &problem_->tensors()});
    try {
      cluster_ = std::make_unique<Cluster>(experiment.cluster, *problem_, experiment.run.seed,
                                           comm_.local_workers(), streamed, optimizer_bytes);
    } catch (const ConfigError& e) {
      rethrow_blaming_padding(e, experiment.optimizer, problem_->dim(), workers);
    }
  });
  if (timed_) cluster_->set_gpus_per_node(gpus_per_node);
  optimizer_->setup(*cluster_);
  if (!cluster_->streams_mean()) mean_grad_.assign(cluster_->dim(), 0.0f);
  if (handed_) {
    worker_taken_.assign(static_cast<size_t>(cluster_->workers()), 0);
    pieces_.reserve(cluster_->tensors().size());
  }
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
  if (handed_) check_handed_ready();
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
  const bool norm_due = grad_norm_due(step_);
  if (handed_) {
    finish_handed_gradients();
  } else if (cluster_->streams_mean()) {
    // The optimizer's begin_step says where the gradients go: to it
    // (take_gradient, as the cluster makes each), or into their mean.
    // Under MPI the streamed mean's exchange across ranks (the optimizer's
    // allreduce, folded into the gradients' computation) happens here: its
    // seconds count with the optimizer's exchanges.
    const bool to_optimizer = optimizer_->begin_step(step_);
    auto hand_over = [this](int worker, std::span<const float> g) {
      optimizer_->take_gradient(worker, g);
    };
    const TakeGradient take(hand_over);
    const TransportStats before = comm_.transport().stats();
    cluster_->compute_gradient_mean(step_, norm_due, to_optimizer ? &take : nullptr);
    streamed_transport_ = stats_since(comm_.transport().stats(), before);
  } else {
    cluster_->compute_gradients(step_);
  }
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

bool Simulation::grad_norm_due(int64_t t) const {
  const int64_t every = experiment_.run.grad_norm_every;
  return every > 0 && t % every == 0;
}

void Simulation::begin_step() {
  if (!handed_) {
    throw std::logic_error("Simulation::begin_step: this problem computes its own gradients");
  }
  if (began_) throw std::logic_error("Simulation::begin_step: step already begun");
  const int64_t t = step_ + 1;
  optimizer_takes_ = false;
  if (cluster_->streams_mean()) {
    optimizer_takes_ = optimizer_->begin_step(t);
    cluster_->begin_taking(!optimizer_takes_, grad_norm_due(t));
    if (optimizer_takes_ && take_row_.empty()) take_row_.assign(cluster_->dim(), 0.0f);
  }
  std::fill(worker_taken_.begin(), worker_taken_.end(), 0);
  taken_ = 0;
  take_failed_ = false;
  losses_measured_ = true;
  began_ = true;
}

void Simulation::take_gradient(int worker, std::span<const float* const> data, double loss) {
  const WorkerRange local = cluster_->local_workers();
  if (!began_) throw std::logic_error("Simulation::take_gradient: begin_step() first");
  if (worker < local.begin || worker >= local.end) {
    throw std::out_of_range("Simulation::take_gradient: worker " + std::to_string(worker) +
                            " is not in [" + std::to_string(local.begin) + ", " +
                            std::to_string(local.end) + ")");
  }
  auto& taken = worker_taken_[static_cast<size_t>(worker)];
  if (taken) {
    throw std::logic_error("Simulation::take_gradient: worker " + std::to_string(worker) +
                           " taken twice in step " + std::to_string(step_ + 1));
  }
  const auto& tensors = cluster_->tensors();
  if (data.size() != tensors.size()) {
    throw std::invalid_argument("Simulation::take_gradient: " + std::to_string(data.size()) +
                                " buffers for " + std::to_string(tensors.size()) + " tensors");
  }
  pieces_.clear();
  for (size_t k = 0; k < tensors.size(); ++k) {
    pieces_.push_back({tensors[k].offset, tensors[k].size, data[k]});
  }
  // Where `bitlab run` puts a computed gradient: the worker's row, the
  // optimizer's worker stage (checked before it changes any state), or the
  // mean's tree.
  bool finite = true;
  if (!cluster_->streams_mean()) {
    finite = gather_row_checked(pieces_, cluster_->grad(worker));
  } else if (optimizer_takes_) {
    finite = gather_row_checked(pieces_, take_row_);
    if (finite) {
      const RowPiece row{0, take_row_.size(), take_row_.data()};
      cluster_->take_into_mean(worker, {&row, 1});  // the fp32 tree of the grad_norm metric, if due
      optimizer_->take_gradient(worker, take_row_);
    }
  } else {
    finite = cluster_->take_into_mean(worker, pieces_);
  }
  if (!finite) {
    take_failed_ = true;
    throw_non_finite(worker);
  }
  cluster_->losses()[static_cast<size_t>(worker)] = loss;
  if (std::isnan(loss)) losses_measured_ = false;
  taken = 1;
  ++taken_;
}

void Simulation::throw_non_finite(int worker) const {
  const int64_t e = first_non_finite(pieces_);
  const auto& tensors = cluster_->tensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const TensorInfo& t = tensors[k];
    if (e < static_cast<int64_t>(t.offset) || e >= static_cast<int64_t>(t.offset + t.size)) {
      continue;
    }
    const int64_t element = e - static_cast<int64_t>(t.offset);
    const float v = pieces_[k].data[element];
    const std::string shown = std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
    throw NonFiniteGradient("step " + std::to_string(step_ + 1) + ", worker " +
                                std::to_string(worker) + ", parameter '" + t.name +
                                "': gradient element " + std::to_string(element) + " is " + shown +
                                ": gradients must be finite (lower the lr, check the loss, or "
                                "clip before the worker block ends)",
                            worker, t.name, element, shown, "must be finite");
  }
  throw std::logic_error("Simulation::take_gradient: a non-finite element the pieces lack");
}

void Simulation::check_handed_ready() const {
  const int local = cluster_->local_workers().size();
  std::string why;
  if (!began_) {
    why = "begin_step() was not called";
  } else if (take_failed_) {
    why = "a gradient was refused";
  } else if (taken_ != local) {
    why = std::to_string(taken_) + " of " + std::to_string(local) + " workers' gradients taken";
  }
  if (!why.empty()) throw std::logic_error("Simulation::step: " + why);
}

void Simulation::finish_handed_gradients() {
  if (cluster_->streams_mean()) {
    // Under MPI the mean's nodes above the ranks' blocks are combined here:
    // its seconds count with the optimizer's exchanges, as in a computed step.
    const TransportStats before = comm_.transport().stats();
    cluster_->finish_taken_mean();
    streamed_transport_ = stats_since(comm_.transport().stats(), before);
  }
  began_ = false;
}

void Simulation::step_optimizer() {
  // Every byte the optimizer moves is logged by the communicator.
  comm_.begin_step(step_);
  StepContext ctx{step_, *cluster_, comm_};
  const TransportStats before = comm_.transport().stats();
  optimizer_->finish_step(ctx);
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
