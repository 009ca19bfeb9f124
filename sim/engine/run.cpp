#include "sim/engine/run.hpp"

#include <omp.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "sim/core/reduce.hpp"

namespace bitlab {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};

// ---------------------------------------------------------------------------
// Simulation

Simulation::Simulation(const Experiment& experiment, Transport* transport)
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
  agree_on_config_errors(ranks, [&] {
    problem_ = pe->make(experiment.problem, scope);
    cluster_ = std::make_unique<Cluster>(experiment.cluster, *problem_, experiment.run.seed,
                                         comm_.local_workers());
  });
  optimizer_ = oe->make(experiment.optimizer);
  optimizer_->setup(*cluster_);
  mean_grad_.assign(cluster_->dim(), 0.0f);
  timed_ = experiment.network.preset != "none";
  if (timed_) {
    topology_ = make_topology(experiment.network, experiment.cluster.workers);
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
  const auto& run = experiment_.run;
  ++step_;
  StepMetrics& m = last_;
  m.step = step_;

  // 1. every worker: loss and gradient on its batch.
  cluster_->compute_gradients(step_);
  // Under MPI every rank needs every worker's loss (8 bytes each) for the
  // same tree mean.
  comm_.share_rows(cluster_->losses().data(), sizeof(double));
  m.train_loss = tree_mean(cluster_->losses());
  if (run.grad_norm_every > 0 && step_ % run.grad_norm_every == 0) {
    // A measurement of the simulator, not traffic: no CommRecord.
    comm_.exact_mean(cluster_->grads(), mean_grad_, WireDtype::kFp32);
    m.grad_norm = norm2(mean_grad_);
  } else {
    m.grad_norm = std::numeric_limits<double>::quiet_NaN();
  }

  // 2. the optimizer; every byte it moves is logged by the communicator.
  const size_t log_before = comm_.log().size();
  comm_.begin_step(step_);
  StepContext ctx{step_, *cluster_, comm_};
  const double transport_before_s = comm_.transport().stats().seconds;
  optimizer_->step(ctx);
  m.transport_s = comm_.transport().stats().seconds - transport_before_s;
  m.phase = optimizer_->phase();

  m.bytes_sent = 0.0;
  m.messages = 0;
  const auto& recs = comm_.log().records();
  for (size_t k = log_before; k < recs.size(); ++k) {
    m.bytes_sent += recs[k].sent_bytes;
    m.messages += recs[k].messages;
  }
  if (timed_) {
    step_records_.assign(recs.begin() + static_cast<ptrdiff_t>(log_before), recs.end());
    worker_compute_s(experiment_.compute, compute_base_s_, run.seed, step_, compute_s_);
    const StepTime st = price_step(step_records_, topology_, compute_s_, experiment_.compute);
    m.compute_s = st.compute_s;
    m.comm_s = st.comm_s;
    m.step_s = st.step_s;
    sim_time_s_ += st.step_s;
    m.sim_time_s = sim_time_s_;
  } else {
    m.compute_s = m.comm_s = m.step_s = m.sim_time_s = std::numeric_limits<double>::quiet_NaN();
  }
  bytes_cum_ += m.bytes_sent;
  messages_cum_ += m.messages;
  m.bytes_sent_cum = bytes_cum_;
  m.messages_cum = messages_cum_;

  // 3. evaluation when due (and always after the last step).
  const bool eval_due = (run.eval_every > 0 && step_ % run.eval_every == 0) || step_ == run.steps;
  if (eval_due && evaluates_) {
    m.eval = evaluate();
  } else {
    m.eval.clear();
  }
  return m;
}

// ---------------------------------------------------------------------------
// Results files

void write_text_atomic(const std::string& path, const std::string& text) {
  // Written to a temporary name and renamed: a reader never sees half a file.
  // The name carries the process id, so processes writing the same file at
  // once (sweep shards starting together in a shared folder) do not collide.
  const fs::path p(path);
  const fs::path tmp = p.string() + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, p);
}

namespace {

// Shortest text that reads back to the same double; "" for NaN (not measured).
std::string fmt(double v) {
  if (std::isnan(v)) return "nan";
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, res.ptr);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_json(const fs::path& p, const Json& j) {
  write_text_atomic(p.string(), j.dump(2) + "\n");
}

Json finite_or_null(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

class Progress {
 public:
  Progress(int64_t total, bool quiet) : total_(total), quiet_(quiet), tty_(isatty(2)) {
    start_ = last_ = Clock::now();
  }
  void update(int64_t step, double loss) {
    if (quiet_) return;
    const auto now = Clock::now();
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    // Quiet for short runs; then ~10 redraws a second on a terminal, one line
    // every 5 s in a log file.
    if (elapsed < 1.0 && step < total_) return;
    const double since = std::chrono::duration<double>(now - last_).count();
    if (step < total_ && since < (tty_ ? 0.1 : 5.0)) return;
    if (elapsed < 1.0) return;  // finished within a second: no bar at all
    last_ = now;
    shown_ = true;
    const double rate = step / elapsed;
    const double eta = rate > 0 ? (total_ - step) / rate : 0.0;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * step / std::max<int64_t>(total_, 1));
    std::string bar(filled, '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "%s[%s] %lld/%lld steps  %.1f steps/s  loss %.6g  ETA %.0fs%s",
                 tty_ ? "\r" : "", bar.c_str(), static_cast<long long>(step),
                 static_cast<long long>(total_), rate, loss, eta, tty_ ? "\033[K" : "\n");
    std::fflush(stderr);
  }
  void finish() {
    if (shown_ && tty_) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_;
  bool quiet_, tty_;
  bool shown_ = false;
  Clock::time_point start_, last_;
};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
}

}  // namespace

std::string make_run_dir(const Experiment& e, const RunCliOptions& o) {
  fs::path dir;
  if (!o.out_dir.empty()) {
    dir = o.out_dir;
    std::error_code ec;
    if (fs::exists(dir / "metrics.csv", ec) || fs::exists(dir / "summary.json", ec)) {
      throw ConfigError("--out " + o.out_dir +
                        ": already holds a run (metrics.csv/summary.json); choose another "
                        "folder or delete it");
    }
  } else {
    const fs::path base = fs::path(o.results_root) / e.run.name;
    const std::string stem =
        e.optimizer.at("name").get<std::string>() + "-seed" + std::to_string(e.run.seed);
    dir = base / stem;
    for (int k = 2; fs::exists(dir); ++k) dir = base / (stem + "-" + std::to_string(k));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError("cannot create results folder " + dir.string() + ": " + ec.message());
  return dir.string();
}

int run_experiment(const Experiment& e, const RunCliOptions& o) {
  if (o.threads > 0) omp_set_num_threads(o.threads);
  // Everything that can fail on bad input (problem data, shards) is built
  // before the results folder exists.
  Simulation sim(e, o.transport);
  Transport& transport = sim.comm().transport();
  // Under MPI only rank 0 writes; every rank runs the same loop and sees the
  // same metrics (so all stop at the same step).
  const bool writer = transport.rank() == 0;
  const bool measured = o.transport != nullptr;
  std::string dir;
  if (!measured) {
    dir = make_run_dir(e, o);
  } else {
    // Rank 0 makes the folder; the others learn whether it could, so a bad
    // --out stops every rank (the message is printed once, by rank 0).
    uint8_t ok = 1;
    std::string error;
    if (writer) {
      try {
        dir = make_run_dir(e, o);
      } catch (const ConfigError& err) {
        ok = 0;
        error = err.what();
      }
    }
    transport.broadcast(&ok, 1, 0);
    if (!ok) throw ConfigError(writer ? error : "(reported by rank 0)");
  }
  const fs::path d(dir);
  const auto started_utc = utc_now();

  if (writer) write_json(d / "config.json", e.resolved);
  Json manifest = Json::object();
  manifest["bitlab_version"] = bitlab_version();
  manifest["git_revision"] = bitlab_git_revision();
  manifest["seed"] = e.run.seed;
  manifest["threads"] = o.threads > 0 ? o.threads : omp_get_max_threads();
  manifest["command"] = o.command_line;
  manifest["started_utc"] = started_utc;
  manifest["backend"] = transport.name();
  manifest["ranks"] = transport.ranks();
  manifest["files"] = {{"config.json", "the resolved experiment, every default filled in"},
                       {"metrics.csv", "one row per step; eval columns at eval steps"},
                       {"comm_log.csv", "one row per collective: what the network model prices"},
                       {"summary.json", "written last: how the run ended, totals, final metrics"}};
  if (measured) {
    manifest["files"]["transport.csv"] =
        "MPI backend: per step, measured wall time and bytes handed to MPI beside the time "
        "model's prediction";
  }
  if (writer) write_json(d / "manifest.json", manifest);

  // On ranks other than 0 the streams stay closed: writes to them do nothing.
  std::ofstream metrics, comm_log, transport_csv;
  if (writer) {
    metrics.open(d / "metrics.csv");
    comm_log.open(d / "comm_log.csv");
    if (measured) transport_csv.open(d / "transport.csv");
  }
  const auto eval_cols = sim.eval_columns();
  metrics << "step,phase,train_loss,grad_norm";
  for (const auto& c : eval_cols) metrics << ',' << c;
  const bool timed = sim.topology() != nullptr;
  metrics << ",bytes_sent,bytes_sent_cum,messages,messages_cum";
  if (timed) metrics << ",compute_s,comm_s,step_s,sim_time_s";
  metrics << ",wall_s\n";
  comm_log << "step,op,algorithm,dtype,scope,ranks,groups,payload_bytes,sent_bytes,messages\n";

  g_interrupted.store(false);
  auto old_handler = std::signal(SIGINT, on_sigint);

  Progress progress(e.run.steps, o.quiet || !writer);
  const auto t0 = Clock::now();
  std::string status = "completed";
  Json divergence;
  StepMetrics last;
  std::vector<double> last_eval(eval_cols.size(), std::numeric_limits<double>::quiet_NaN());
  int64_t last_eval_step = 0;
  struct PhaseTotals {
    int64_t steps = 0;
    double bytes = 0, compute_s = 0, comm_s = 0;
  };
  std::map<std::string, PhaseTotals> phases;
  size_t logged = 0;
  // Measured next to modelled (MPI backend): the step's wall time (max over
  // ranks), the bytes this rank and all ranks handed to MPI, and MPI calls.
  // The logical bytes (per worker, as metrics.csv) and the model's times sit
  // beside them; logged bytes count every worker, MPI bytes only what crosses
  // between ranks (workers of one rank share memory). Last, the seconds spent
  // inside MPI during the optimizer's exchanges (rank 0, and the max over
  // ranks): what model_comm_s predicts (waiting for slower ranks included).
  transport_csv << "step,wall_step_s,mpi_bytes_rank0,mpi_bytes_all_ranks,mpi_calls_rank0,"
                   "model_bytes_per_worker,model_comm_s,model_step_s,mpi_comm_s_rank0,"
                   "mpi_comm_s_max\n";
  struct MeasuredTotals {
    double wall_s = 0, bytes_rank0 = 0, bytes_all = 0, calls_rank0 = 0, comm_s_rank0 = 0;
  } measured_totals;

  for (int64_t t = 1; t <= e.run.steps; ++t) {
    const auto step_start = Clock::now();
    const TransportStats before = transport.stats();
    StepMetrics m = sim.step();
    m.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (measured) {
      const double wall =
          transport.max(std::chrono::duration<double>(Clock::now() - step_start).count());
      const double bytes = static_cast<double>(transport.stats().bytes_sent - before.bytes_sent);
      const double calls = static_cast<double>(transport.stats().calls - before.calls);
      const double bytes_all = transport.sum(bytes);
      measured_totals.wall_s += wall;
      measured_totals.bytes_rank0 += bytes;
      measured_totals.bytes_all += bytes_all;
      measured_totals.calls_rank0 += calls;
      const double comm_max = transport.max(m.transport_s);
      measured_totals.comm_s_rank0 += m.transport_s;
      transport_csv << m.step << ',' << fmt(wall) << ',' << fmt(bytes) << ',' << fmt(bytes_all)
                    << ',' << fmt(calls) << ',' << fmt(m.bytes_sent) << ',' << fmt(m.comm_s) << ','
                    << fmt(m.step_s) << ',' << fmt(m.transport_s) << ',' << fmt(comm_max) << '\n';
    }
    metrics << m.step << ',' << m.phase << ',' << fmt(m.train_loss) << ','
            << (std::isnan(m.grad_norm) ? std::string() : fmt(m.grad_norm));
    for (size_t k = 0; k < eval_cols.size(); ++k) {
      metrics << ',' << (m.eval.empty() ? std::string() : fmt(m.eval[k]));
    }
    metrics << ',' << fmt(m.bytes_sent) << ',' << fmt(m.bytes_sent_cum) << ',' << m.messages << ','
            << m.messages_cum;
    if (timed) {
      metrics << ',' << fmt(m.compute_s) << ',' << fmt(m.comm_s) << ',' << fmt(m.step_s) << ','
              << fmt(m.sim_time_s);
    }
    metrics << ',' << fmt(m.wall_s) << '\n';
    const auto& recs = sim.comm().log().records();
    for (; logged < recs.size(); ++logged) {
      const auto& r = recs[logged];
      comm_log << r.step << ',' << r.op << ',' << r.algorithm << ',' << r.dtype << ',' << r.scope
               << ',' << r.ranks << ',' << r.groups << ',' << r.payload_bytes << ','
               << fmt(r.sent_bytes) << ',' << r.messages << '\n';
    }
    auto& ph = phases[m.phase];
    ph.steps += 1;
    ph.bytes += m.bytes_sent;
    if (timed) {
      ph.compute_s += m.compute_s;
      ph.comm_s += m.comm_s;
    }
    if (!m.eval.empty()) {
      last_eval = m.eval;
      last_eval_step = m.step;
    }
    last = m;
    progress.update(t, m.train_loss);

    const bool bad_loss = !std::isfinite(m.train_loss);
    const bool bad_grad = !std::isnan(m.grad_norm) && !std::isfinite(m.grad_norm);
    if (bad_loss || bad_grad) {
      status = "diverged";
      const double lr = e.optimizer.contains("lr") ? e.optimizer.at("lr").get<double>() : 0.0;
      divergence = {{"step", m.step},
                    {"what", bad_loss ? "train_loss is " + fmt(m.train_loss)
                                      : "grad_norm is " + fmt(m.grad_norm)},
                    {"hint", "the optimizer diverged; try a smaller optimizer.lr (now " + fmt(lr) +
                                 "), a longer warm-up, or check the problem's scale"}};
      break;
    }
    // Under MPI a Ctrl-C may reach the ranks at different steps: stop when any
    // rank saw it (a bookkeeping max, not a metric).
    const bool interrupted =
        measured ? transport.max(g_interrupted.load() ? 1.0 : 0.0) > 0.0 : g_interrupted.load();
    if (interrupted) {
      status = "interrupted";
      break;
    }
  }
  progress.finish();
  std::signal(SIGINT, old_handler);
  metrics.close();
  comm_log.close();
  transport_csv.close();

  const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
  Json summary = Json::object();
  summary["status"] = status;
  summary["experiment"] = e.run.name;
  summary["problem"] = e.problem.at("name");
  summary["optimizer"] = e.optimizer.at("name");
  summary["workers"] = e.cluster.workers;
  summary["seed"] = e.run.seed;
  summary["steps_planned"] = e.run.steps;
  summary["steps_completed"] = last.step;
  if (status == "diverged") summary["divergence"] = divergence;
  Json fin = Json::object();
  fin["train_loss"] = finite_or_null(last.train_loss);
  fin["grad_norm"] = finite_or_null(last.grad_norm);
  fin["eval_step"] = last_eval_step;
  for (size_t k = 0; k < eval_cols.size(); ++k) fin[eval_cols[k]] = finite_or_null(last_eval[k]);
  summary["final"] = fin;
  const auto opt = sim.problem().optimal_loss();
  summary["optimal_loss"] = opt ? Json(*opt) : Json(nullptr);
  summary["totals"] = {{"bytes_sent_per_worker", last.bytes_sent_cum},
                       {"messages_per_worker", last.messages_cum},
                       {"collectives", sim.comm().log().size()}};
  Json ph = Json::object();
  for (const auto& [name, v] : phases) {
    ph[name] = {{"steps", v.steps}, {"bytes_sent_per_worker", v.bytes}};
    if (timed) {
      ph[name]["compute_s"] = v.compute_s;
      ph[name]["comm_s"] = v.comm_s;
      ph[name]["step_s_mean"] = v.steps ? (v.compute_s + v.comm_s) / v.steps : 0.0;
    }
  }
  summary["phases"] = ph;
  summary["dim"] = sim.cluster().dim();
  if (timed) {
    const Topology& t = *sim.topology();
    double samples = 0;
    for (int i = 0; i < sim.cluster().workers(); ++i) {
      samples += compute_samples(sim.cluster().batch_samples(i));
    }
    summary["time"] = {
        {"network", t.name},
        {"nodes", t.nodes},
        {"gpus_per_node", t.gpus_per_node},
        {"sim_time_s", last.sim_time_s},
        {"samples_per_s", last.sim_time_s > 0 ? samples * last.step / last.sim_time_s : 0.0},
        {"compute_s",
         [&] {
           double c = 0;
           for (const auto& [n, v] : phases) c += v.compute_s;
           return c;
         }()},
        {"comm_s", [&] {
           double c = 0;
           for (const auto& [n, v] : phases) c += v.comm_s;
           return c;
         }()}};
  }
  summary["wall_s"] = wall;
  if (measured) {
    // Training samples whose features each rank holds (its workers' shards;
    // rank 0 also the first train_eval_samples it evaluates on).
    const size_t held = sim.problem().held_train_samples();
    const auto held_others =
        static_cast<size_t>(transport.max(writer ? 0.0 : static_cast<double>(held)));
    summary["measured"] = {
        {"backend", transport.name()},
        {"ranks", transport.ranks()},
        {"wall_step_s_sum", measured_totals.wall_s},
        {"mpi_bytes_rank0", measured_totals.bytes_rank0},
        {"mpi_bytes_all_ranks", measured_totals.bytes_all},
        {"mpi_calls_rank0", measured_totals.calls_rank0},
        {"mpi_comm_s_rank0", measured_totals.comm_s_rank0},
        // Per-worker gradient / local-parameter buffers
        // rank 0 holds: its block of workers only.
        {"cluster_worker_buffer_bytes_rank0", sim.cluster().worker_buffer_bytes()},
        // The optimizer's per-worker rows rank 0 holds (its block of workers,
        // the rows of the collectives it owns included).
        {"optimizer_worker_state_bytes_rank0", sim.optimizer().worker_state_bytes()},
        {"train_samples", sim.problem().num_train()},
        {"train_samples_held_rank0", held},
        {"train_samples_held_max_other_rank", held_others}};
  }
  summary["steps_per_s"] = wall > 0 ? last.step / wall : 0.0;
  summary["bitlab_version"] = bitlab_version();
  summary["git_revision"] = bitlab_git_revision();
  summary["finished_utc"] = utc_now();
  const int exit_status = status == "diverged" ? 3 : status == "interrupted" ? 130 : 0;
  if (!writer) return exit_status;
  write_json(d / "summary.json", summary);

  if (!o.quiet) {
    std::fprintf(stderr, "%s: %s, %lld/%lld steps in %.2f s (%.0f steps/s)\n", e.run.name.c_str(),
                 status.c_str(), static_cast<long long>(last.step),
                 static_cast<long long>(e.run.steps), wall, wall > 0 ? last.step / wall : 0.0);
    std::fprintf(stderr, "  train_loss %.6g", last.train_loss);
    for (size_t k = 0; k < eval_cols.size(); ++k) {
      std::fprintf(stderr, "  %s %.6g", eval_cols[k].c_str(), last_eval[k]);
    }
    std::fprintf(stderr, "\n  sent %.6g bytes per worker in %zu collectives\n", last.bytes_sent_cum,
                 sim.comm().log().size());
    if (status == "diverged") {
      std::fprintf(stderr, "  diverged at step %lld: %s\n", static_cast<long long>(last.step),
                   divergence["hint"].get<std::string>().c_str());
    }
    std::fprintf(stderr, "  results: %s\n", dir.c_str());
  }
  // The folder, alone on stdout, for scripts.
  std::printf("%s\n", dir.c_str());
  std::fflush(stdout);
  return exit_status;
}

}  // namespace bitlab
