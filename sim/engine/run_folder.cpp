// Before the first step of a run: the results folder, config.json,
// manifest.json and the csv files with their headers (run_parts.hpp).
#include "sim/engine/run_parts.hpp"

#include <omp.h>

#include "sim/core/threads.hpp"

namespace bitlab::run_parts {

namespace {

Json make_manifest(const RunContext& run, const std::string& started_utc) {
  Json manifest = Json::object();
  manifest["bitlab_version"] = bitlab_version();
  manifest["git_revision"] = bitlab_git_revision();
  manifest["seed"] = run.experiment.run.seed;
  manifest["threads"] = run.options.threads > 0 ? run.options.threads : omp_get_max_threads();
  manifest["omp_wait_policy"] = omp_wait_policy_text();
  manifest["command"] = run.options.command_line;
  manifest["started_utc"] = started_utc;
  manifest["backend"] = run.transport.name();
  manifest["ranks"] = run.transport.ranks();
  manifest["files"] = {{"config.json", "the resolved experiment, every default filled in"},
                       {"metrics.csv", "one row per step; eval columns at eval steps"},
                       {"comm_log.csv", "one row per collective: what the network model prices"},
                       {"summary.json", "written last: how the run ended, totals, final metrics"}};
  if (run.options.checkpoint_every > 0) {
    manifest["checkpoint_every"] = run.options.checkpoint_every;
    manifest["files"]["checkpoint.bin"] =
        "the full state at the last checkpoint, for bitlab run --resume (binary)";
  }
  if (run.measured) {
    manifest["files"]["transport.csv"] =
        "MPI backend: per step, measured wall time and bytes handed to MPI beside the time "
        "model's prediction";
  }
  return manifest;
}

}  // namespace

std::string agree_on_run_dir(const RunContext& run) {
  if (!run.measured) return make_run_dir(run.experiment, run.options);
  // Rank 0 makes the folder; the others learn whether it could, so a bad
  // --out stops every rank (the message is printed once, by rank 0).
  std::string dir;
  uint8_t ok = 1;
  std::string error;
  if (run.writer) {
    try {
      dir = make_run_dir(run.experiment, run.options);
    } catch (const ConfigError& err) {
      ok = 0;
      error = err.what();
    }
  }
  run.transport.broadcast(&ok, 1, 0);
  if (!ok) throw ConfigError(run.writer ? error : "(reported by rank 0)");
  // Every rank knows the folder (a resume reads checkpoint.bin from it, a
  // twin runs into its twin/); rank 0 alone writes it.
  return text_from_rank0(run.transport, dir);
}

std::string text_from_rank0(Transport& transport, std::string text) {
  int64_t bytes = static_cast<int64_t>(text.size());
  transport.broadcast(reinterpret_cast<uint8_t*>(&bytes), sizeof bytes, 0);
  text.resize(static_cast<size_t>(bytes));
  transport.broadcast(reinterpret_cast<uint8_t*>(text.data()), bytes, 0);
  return text;
}


// A refused write (a full disk) removes what the run wrote so far and the
// folder when that leaves it empty: no folder holding only .bitlab.lock looks
// like a run. IoError then ends the command with exit 4.
void write_config_and_manifest(const RunContext& run) {
  if (!run.writer) return;
  const std::string started_utc = utc_now();
  const fs::path d(run.dir);
  try {
    write_json(d / "config.json", run.experiment.resolved);
    write_json(d / "manifest.json", make_manifest(run, started_utc));
  } catch (const IoError&) {
    std::error_code ignored;
    for (const char* name : {"config.json", "manifest.json", ".bitlab.lock"}) {
      fs::remove(d / name, ignored);
    }
    fs::remove(d, ignored);  // only when empty
    throw;
  }
}

// Opens the csvs (rank 0) and writes their header lines.
void open_run_files(const RunContext& run, RunFiles& files) {
  if (run.writer) {
    const fs::path d(run.dir);
    files.dir = run.dir;
    files.metrics.open(d / "metrics.csv");
    files.comm_log.open(d / "comm_log.csv");
    if (run.measured) files.transport_csv.open(d / "transport.csv");
  }
  files.metrics << "step,phase,train_loss,grad_norm";
  for (const auto& c : run.eval_cols) files.metrics << ',' << c;
  files.metrics << ",bytes_sent,bytes_sent_cum,messages,messages_cum";
  if (run.timed) files.metrics << ",compute_s,comm_s,step_s,sim_time_s";
  files.metrics << ",wall_s\n";
  files.comm_log
      << "step,op,algorithm,dtype,scope,ranks,groups,payload_bytes,sent_bytes,messages\n";
  // Measured next to modelled (MPI backend): the step's wall time (max over
  // ranks), the bytes this rank and all ranks handed to MPI, and MPI calls.
  // The logical bytes (per worker, as metrics.csv) and the model's times sit
  // beside them; logged bytes count every worker, MPI bytes only what crosses
  // between ranks (workers of one rank share memory). Last, the seconds spent
  // inside MPI during the optimizer's exchanges (rank 0, and the max over
  // ranks): what model_comm_s predicts (waiting for slower ranks included,
  // unless --barrier-before-exchanges takes the waiting into
  // mpi_wait_s_rank0, the seconds rank 0 spent in those barriers; 0 without).
  files.transport_csv << "step,wall_step_s,mpi_bytes_rank0,mpi_bytes_all_ranks,mpi_calls_rank0,"
                         "model_bytes_per_worker,model_comm_s,model_step_s,mpi_comm_s_rank0,"
                         "mpi_comm_s_max,mpi_wait_s_rank0\n";
  // Each header that was written is the first whole content its file is cut
  // back to after a failed write.
  files.header_failure = files.flush(files.good_bytes);
}

}  // namespace bitlab::run_parts

namespace bitlab {

namespace fs = std::filesystem;

std::string make_run_dir(const Experiment& e, const RunOptions& o) {
  if (o.resume) return o.out_dir;  // resume_point checked it
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
  create_folder(dir.string(), "results folder");
  return dir.string();
}

}  // namespace bitlab
