// `bitlab sweep FILE.json [--jobs N] [--resume] [--out DIR] [--quiet]
// [--shard i/k | --merge] [--dry-run]`: a
// base experiment, a grid and zipped lists over config paths and a list of
// seeds, each run in a child process (docs/sweeps.md has the file format, the
// output folder and the exit statuses).
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include "sim/cli/commands.hpp"
#include "sim/cli/thread_limits.hpp"
#include "sim/comm/launcher.hpp"
#include "sim/lab/sweep.hpp"

namespace bitlab {

namespace {

struct SweepFlags {
  std::string file;
  std::string shard;
  bool dry_run = false;
  SweepOptions options;
};

}  // namespace

Subcommand add_sweep_command(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  auto* cmd = app.add_subcommand(
      "sweep",
      "run a grid of experiments in parallel, one results folder per run, and a sweep.csv; "
      "prints the sweep folder");
  cmd->footer(
      "Sweep file (JSON): {\"name\": N, \"base\": \"exp.json\" | {experiment},\n"
      "  \"grid\": {\"optimizer.lr\": [0.01, 0.03], ...}   (cartesian product)\n"
      "  \"zip\": {\"optimizer.name\": [\"adam\", \"onebit_adam\"], ...}   (same-length lists, "
      "in step)\n"
      "  \"seeds\": [1, 2, 3]}\n"
      "Output: results/<name>/ (or --out): sweep.json, run-NNN_<assignments>/, sweep.csv.\n"
      "Exit status: 0 all runs completed; 3 some run diverged or failed (listed at the end); "
      "4 a run or the sweep could not write its results (a full disk); 2 bad sweep (nothing "
      "created); 128 + the signal interrupted (130 Ctrl-C).");
  cmd->add_option("file", f->file, "sweep JSON file")->required();
  cmd->add_option("--jobs,-j", f->options.jobs, "runs at once (default: the machine's cores)")
      ->check(thread_count_check());
  cmd->add_option("--threads", f->options.threads,
                  "OpenMP threads of each run (default: the machine's cores divided among the "
                  "jobs, at least 1)")
      ->check(thread_count_check());
  cmd->add_flag("--resume", f->options.resume,
                "finish an earlier sweep in the same folder: skip its completed and diverged "
                "runs, re-run the others");
  cmd->add_option("--out", f->options.out_dir, "sweep folder (default: results/<name>)");
  cmd->add_option("--checkpoint-every", f->options.checkpoint_every,
                  "each run writes a checkpoint every K steps; --resume then continues a "
                  "half-finished run from it instead of starting it again")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_flag("--quiet,-q", f->options.quiet, "no progress or summary on stderr");
  cmd->add_flag("--dry-run,-n", f->dry_run,
                "check the sweep and list its runs with what differs between their resolved "
                "experiments; run and write nothing");
  auto* shard = cmd->add_option(
      "--shard", f->shard,
      "i/k (0-based, 0 <= i < k): run only the runs whose 1-based index r has (r-1) % k == i, "
      "in the shared sweep folder, writing sweep.shard-i-of-k.csv (one per array task or "
      "machine); then --merge. \"auto\": i/k from the launcher (mpirun's rank/size, or a "
      "Slurm array task's index/count)");
  cmd->add_flag("--merge", f->options.merge,
                "run nothing: gather the shards' csvs (and the runs' summaries) of the sweep "
                "folder into the sweep.csv an unsharded sweep writes; exit 2 naming a missing "
                "shard or run")
      ->excludes(shard);
  return {cmd, [f]() {
            const auto launcher = mpi_launcher_rank();
            if (f->shard == "auto") {
              const auto from = shard_launcher_rank();
              if (!from) {
                throw ConfigError(
                    "--shard auto: no launcher rank in the environment (looked for "
                    "OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE and SLURM_ARRAY_TASK_ID/"
                    "SLURM_ARRAY_TASK_COUNT with more than one process); give --shard i/k");
              }
              f->options.shard = from->rank;
              f->options.shards = from->size;
            } else if (!f->shard.empty()) {
              std::tie(f->options.shard, f->options.shards) = parse_shard(f->shard);
            } else if (launcher) {
              // Every rank would run the whole sweep (or merge) into one folder.
              throw ConfigError(
                  "bitlab sweep under an MPI launcher (" + std::to_string(launcher->size) +
                  " processes, " + launcher->source +
                  ") without --shard: every process would run the whole sweep in the same "
                  "folder; pass --shard auto (each process runs its share), and merge once "
                  "afterwards, without mpirun: bitlab sweep FILE --out DIR --merge");
            }
            const SweepSpec spec = load_sweep(f->file);
            if (!f->options.quiet) {
              for (const auto& w : spec.warnings) {
                std::fprintf(stderr, "bitlab sweep: warning: %s\n", w.c_str());
              }
            }
            if (f->dry_run) {
              std::fputs(sweep_plan_text(spec, f->options).c_str(), stdout);
              return 0;
            }
            return run_sweep(spec, f->options);
          }};
}

}  // namespace bitlab
