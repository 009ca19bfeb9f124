// The MPI backend: `mpirun -np R bitlab run FILE --backend mpi`
// must write the same metrics.csv (but the wall-clock column) and comm_log.csv
// as `bitlab run FILE`, byte for byte, for every optimizer family; a worker
// count the ranks do not divide is a config error (exit 2). Skipped, with the
// reason printed, in a build without MPI.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim/comm/comm.hpp"
#include "sim/comm/transport.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "tests/alloc_counter.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using namespace bitlab::testing;  // Result, TempDir, run_bitlab, run_shell, slurp, without_wall_column

namespace {

// A small MLP on 8 workers: 24 steps reach every phase of the optimizers
// below (warm-up → compression at step 8; 0/1 Adam's local-step interval
// grows to 4), with the time model on so the priced columns are compared too.
std::string experiment(const std::string& optimizer) {
  return R"({"name": "mpi", "seed": 3, "steps": 24, "eval_every": 8, "grad_norm_every": 4,
    "problem": {"name": "mlp", "input_dim": 8, "hidden": 16, "classes": 4, "samples": 512},
    "cluster": {"workers": 8, "batch_size": 8, "sharding": "iid"},
    "network": {"preset": "ethernet_40g_v100x4"},
    "optimizer": )" +
         optimizer + "}";
}

#ifdef BITLAB_MPIEXEC
// What Optimizer::held_worker_state_bytes() is on rank 0 for the runs of the first
// test below (8 workers, d = 212 floats, rows of stride 224 = d rounded up to
// 16): b = 8/ranks resident workers' rows of each per-worker array, plus, for
// the collectives the optimizer owns, their resident rows.
int64_t optimizer_state_bytes_rank0(const std::string& label, int ranks) {
  const int64_t b = 8 / ranks, d = 212, stride = 224;
  // Hierarchical node size g in the label ("node_size g"), 0 when flat.
  const size_t at = label.find("node_size ");
  const int64_t g = at == std::string::npos ? 0 : std::stoll(label.substr(at + 10));
  // CompressedAllgatherMean: C(x_i) of the b workers, and the node means of
  // the nodes rank 0 leads (it owns worker 0, so node 0; b/g nodes when g < b).
  const int64_t allgather_rows = b + (g > 0 ? std::max<int64_t>(1, b / g) : 0);
  if (label.rfind("adam", 0) == 0) return 0;                       // shared state only
  if (label.rfind("onebit", 0) == 0) return 0;  // m_i folded into the 1-bit allreduce's rows
  if (label.rfind("zero_one", 0) == 0) return 2 * b * stride * 4;  // m_i, u_i
  if (label.rfind("binsgdm", 0) == 0) return (3 * b + allgather_rows) * stride * 4;  // m, b, z
  // LoCo: h_i (stride), e_i (d floats: ErrorFeedback rows are unpadded), and
  // the reduce-scatter's Q(h_i) of the padded length D = 1024 (d rounded up
  // to n·group_size = 8·128), or the hierarchical allgather's rows.
  REQUIRE(label.rfind("loco", 0) == 0);
  const int64_t exchange = g == 0 ? b * 1024 : allgather_rows * stride;
  return (b * stride + b * d + exchange) * 4;
}

// What Cluster::worker_buffer_bytes() is on rank 0 for the runs of the first
// test below (one OpenMP thread a rank). Optimizers that read the gradients
// only through their mean (and the 1-bit family, whose compressed steps fold
// each gradient as it is made) stream it under MPI too: rank 0 holds one
// block of its b = 8/ranks workers' rows (b <= 16), one node buffer and the
// mean per folded tree (2 with adam's fp16 wire: the grad_norm metric's fp32
// tree too), and the cross-rank combination's buffers: its maximum of the
// tree (the node [0, b): d floats) and every rank's maximum's share of its
// element range (ranks × (d/ranks + 1)). LoCo and BinSGDM read per-worker
// gradients: b rows. 0/1 Adam adds its workers' local parameters (b rows).
int64_t cluster_bytes_rank0(const std::string& label, int ranks) {
  const int64_t b = 8 / ranks, d = 212, stride = 224;
  if (label.rfind("loco", 0) == 0 || label.rfind("binsgdm", 0) == 0) return b * stride * 4;
  const int64_t trees = label.find("fp16") != std::string::npos ? 2 : 1;
  const int64_t streamed = b * stride + trees * (stride + d) + d + ranks * (d / ranks + 1);
  const int64_t local_params = label.rfind("zero_one", 0) == 0 ? b * stride : 0;
  return (streamed + local_params) * 4;
}

// Loopback, oversubscribed (CI has 2 cores), as root where needed; ranks yield
// instead of busy-polling and use one OpenMP thread each.
std::string mpirun(int ranks) {
  return std::string("OMP_NUM_THREADS=1 ") + BITLAB_MPIEXEC +
         " --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np " +
         std::to_string(ranks) + " ";
}
// `bitlab run FILE` into dir/sim (must succeed).
fs::path run_sim(const TempDir& dir, const std::string& file) {
  const fs::path out = dir.path / "sim";
  const Result r = run_bitlab(dir, "run " + file + " --quiet --out " + out.string());
  REQUIRE_MESSAGE(r.status == 0, r.err);
  return out;
}

// What `bitlab run FILE` wrote into dir/sim: metrics.csv without the wall
// clock column, and comm_log.csv (it must have communicated).
struct MpiReference {
  std::string metrics, comm_log;
};
MpiReference simulate(const TempDir& dir, const std::string& file) {
  const fs::path sim = run_sim(dir, file);
  MpiReference ref{without_wall_column(slurp(sim / "metrics.csv")), slurp(sim / "comm_log.csv")};
  REQUIRE(ref.comm_log.size() > 100);
  return ref;
}

// `mpirun -np ranks bitlab run FILE --backend mpi` into dir/mpi<ranks> (must
// succeed); `r` gets the result.
fs::path run_mpi(const TempDir& dir, const std::string& file, int ranks, Result& r) {
  const fs::path out = dir.path / ("mpi" + std::to_string(ranks));
  r = run_shell(dir, mpirun(ranks) + BITLAB_BINARY + " run " + file +
                         " --quiet --backend mpi --out " + out.string());
  REQUIRE_MESSAGE(r.status == 0, r.err);
  return out;
}
// An mpirun refused as a config error: exit 2, `message` printed once (by
// rank 0), no results folder `out`.
void check_refused_once(const Result& r, const std::string& message, const fs::path& out) {
  CHECK(r.status == 2);
  const size_t first = r.err.find(message);
  CHECK_MESSAGE(first != std::string::npos, r.err);
  CHECK_MESSAGE(r.err.find(message, first + 1) == std::string::npos, r.err);
  CHECK_FALSE(fs::exists(out));
}

// Ctrl-C under mpirun. Open MPI's mpirun puts each rank in its own process
// group, so a terminal's Ctrl-C (SIGINT to mpirun's group) reaches mpirun
// only; mpirun answers any SIGINT or SIGTERM by sending the ranks SIGTERM,
// then SIGKILL odls_base_sigkill_timeout (1) seconds later, and exits 1
// itself (a rank that waited in MPI_Finalize for mpirun would be killed: the
// exit statuses below check that none does). A scheduler (srun, a kill of the
// ranks) signals the ranks directly, and maybe not all at once.
// Each rank runs under rank.sh, which records the rank's own exit status past
// mpirun's: bitlab runs in a session of its own (mpirun's SIGKILL of the
// script's process group cannot cut the recording short), and the script
// passes on the signals mpirun sends; rank-R.pid names that session (to
// signal one rank).
const char* kRankScript = R"sh(#!/bin/sh
trap '' INT TERM HUP
setsid sh -c 'trap "" INT TERM HUP; "$@"; echo $? > "$STATUS_DIR/rank-$OMPI_COMM_WORLD_RANK.status"' rank "$@" &
child=$!
echo $child > "$STATUS_DIR/rank-$OMPI_COMM_WORLD_RANK.pid"
for sig in INT TERM HUP; do trap "kill -$sig -$child" $sig; done
while kill -0 $child 2>/dev/null; do wait $child; done
exit "$(cat "$STATUS_DIR/rank-$OMPI_COMM_WORLD_RANK.status")"
)sh";

// Starts `mpirun -np 2 rank.sh bitlab run FILE --backend mpi --out OUT` in
// its own process group (as a shell starts a foreground job); returns its pid.
pid_t start_mpi_run(const TempDir& dir, const std::string& file, const fs::path& out) {
  const std::string script = dir.file("rank.sh", kRankScript);
  fs::permissions(script, fs::perms::owner_all);
  const std::string command = std::string("exec ") + BITLAB_MPIEXEC +
                              " --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 "
                              "-np 2 " +
                              script + " " + BITLAB_BINARY + " run " + file +
                              " --quiet --backend mpi --out " + out.string();
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setpgid(0, 0);
    setenv("OMP_NUM_THREADS", "1", 1);
    setenv("STATUS_DIR", dir.path.c_str(), 1);
    freopen((dir.path / "mpirun.out").c_str(), "w", stdout);
    freopen((dir.path / "mpirun.err").c_str(), "w", stderr);
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits (at most 60 s) until `path` exists with at least `bytes` bytes.
bool wait_for_file(const fs::path& path, uintmax_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(path, ec) && fs::file_size(path, ec) >= bytes) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// mpirun's exit status (-1: killed by a signal); a job still running after
// 60 s (ranks that did not agree on a step and wait on each other) is killed
// and fails the test.
int wait_for_mpirun(pid_t pid) {
  int raw = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &raw, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &raw, 0);
      FAIL("mpirun still running 60 s after the signal");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
}

// Runs the "mpi rank: …" test case `pattern` of this binary on `ranks` MPI
// ranks (BITLAB_MPI_RANK_TEST set); each rank prints `marker` when it reaches
// the case's end.
void run_rank_case(int ranks, const std::string& pattern, const std::string& marker) {
  TempDir dir;
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const Result r = run_shell(dir, mpirun(ranks) + "env BITLAB_MPI_RANK_TEST=1 " + self +
                                      " --test-case='" + pattern + "' --no-intro=true");
  CHECK_MESSAGE(r.status == 0, std::string(r.out + r.err));
  size_t ran = 0;
  for (size_t at = r.out.find(marker); at != std::string::npos; at = r.out.find(marker, at + 1)) {
    ++ran;
  }
  CHECK_MESSAGE(ran == static_cast<size_t>(ranks), std::string(r.out + r.err));
}
#endif

}  // namespace

TEST_SUITE("mpi") {
#ifndef BITLAB_MPIEXEC
  TEST_CASE("without MPI in the build --backend mpi is a clear error (exit 2)") {
    MESSAGE(
        "MPI comparisons skipped: this build has no MPI backend (CMake found no MPI or "
        "-DBITLAB_MPI=OFF)");
    TempDir dir;
    const std::string file = dir.file("e.json", experiment(R"({"name": "adam"})"));
    const Result r =
        run_bitlab(dir, "run " + file + " --backend mpi --out " + (dir.path / "run").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("--backend mpi") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "run"));
  }
#else
  TEST_CASE("mpirun -np 2 and 4 --backend mpi: metrics and comm log bit-identical to bitlab run") {
    const std::vector<std::pair<std::string, std::string> > optimizers = {
        {"adam (fp16 wire)", R"({"name": "adam", "lr": 0.01, "wire": "fp16"})"},
        {"onebit_adam", R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 8})"},
        {"onebit_lamb", R"({"name": "onebit_lamb", "lr": 0.01, "freeze_step": 8})"},
        // One 1-bit allreduce per tensor, each split over the ranks on its own.
        {"onebit_adam (granularity tensor)",
         R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 8, "granularity": "tensor"})"},
        {"onebit_lamb (granularity tensor)",
         R"({"name": "onebit_lamb", "lr": 0.01, "freeze_step": 8, "granularity": "tensor"})"},
        {"zero_one_adam (local steps)",
         R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 8, "var_update_scaler": 2,
             "local_step_scaler": 2, "local_step_clipper": 4})"},
        {"loco", R"({"name": "loco", "lr": 0.01, "exchange": "flat"})"},
        // The re-quantized gather (codes + scales both ways) with stochastic
        // rounding: chunk messages cut from one encoded buffer keep its draws.
        {"loco (stochastic, quantized gather)",
         R"({"name": "loco", "lr": 0.01, "exchange": "flat", "rounding": "stochastic", "gather": "quantized"})"},
        {"loco (hierarchical, node_size 4)",
         R"({"name": "loco", "lr": 0.01, "exchange": "allgather", "node_size": 4})"},
        // node_size 2: with 2 ranks each rank holds two whole nodes, with 4
        // ranks each rank is one node; node_size 4 with 4 ranks: two ranks
        // per node (node and leader sub-communicators).
        {"loco (hierarchical, node_size 2)",
         R"({"name": "loco", "lr": 0.01, "exchange": "allgather", "node_size": 2})"},
        {"binsgdm (hierarchical, node_size 4)",
         R"({"name": "binsgdm", "lr": 0.01, "node_size": 4})"},
        {"binsgdm", R"({"name": "binsgdm", "lr": 0.01})"},
    };
    for (const auto& [label, optimizer] : optimizers) {
      const std::string case_label = label;  // clang 14: no structured binding in CAPTURE
      CAPTURE(case_label);
      TempDir dir;
      const std::string file = dir.file("e.json", experiment(optimizer));
      const MpiReference ref = simulate(dir, file);
      for (const int ranks : {2, 4}) {
        CAPTURE(ranks);
        Result r;
        const fs::path out = run_mpi(dir, file, ranks, r);
        CHECK(without_wall_column(slurp(out / "metrics.csv")) == ref.metrics);
        CHECK(slurp(out / "comm_log.csv") == ref.comm_log);
        // Measured beside modelled: a header and one row per step, and rank 0
        // handed bytes to MPI (the exchanges really happened).
        const std::string transport = slurp(out / "transport.csv");
        CHECK(transport.rfind("step,wall_step_s,mpi_bytes_rank0", 0) == 0);
        CHECK(transport.find(",model_comm_s,model_step_s,mpi_comm_s_rank0,mpi_comm_s_max,"
                             "mpi_wait_s_rank0\n") != std::string::npos);
        CHECK(std::count(transport.begin(), transport.end(), '\n') == 25);
        const std::string summary = slurp(out / "summary.json");
        CHECK(summary.find("\"mpi_bytes_rank0\"") != std::string::npos);
        // Memory is divided: rank 0 holds the gradient buffers (and 0/1
        // Adam's local parameters) of its 8/ranks workers only, each of
        // stride 224 floats (d = 212 rounded up to 16), or the streamed
        // mean's buffers (cluster_bytes_rank0).
        CHECK(summary.find("\"cluster_worker_buffer_bytes_rank0\": " +
                           std::to_string(cluster_bytes_rank0(label, ranks))) !=
              std::string::npos);
        // The optimizer's per-worker rows, all divided: rank 0 holds those of
        // its b = 8/ranks workers only (global worker i at row i − first).
        CHECK(summary.find("\"optimizer_worker_state_bytes_rank0\": " +
                           std::to_string(optimizer_state_bytes_rank0(label, ranks))) !=
              std::string::npos);
        // Each rank holds only its workers' training rows; rank 0 evaluates
        // the full training loss, so it holds all 512 (synthetic problems);
        // iid shards of 512 / 8 samples: 512 / ranks on every other rank.
        CHECK(summary.find("\"train_samples_held_rank0\": 512") != std::string::npos);
        CHECK(summary.find("\"train_samples_held_max_other_rank\": " +
                           std::to_string(512 / ranks)) != std::string::npos);
        // Only rank 0 printed the folder.
        CHECK(r.out == out.string() + "\n");
      }
    }
  }

  // The parity matrix: every optimizer's default and each option
  // that changes the exchange, against one simulator run per configuration
  // (8 workers on 2 nodes of 4, the preset's GPUs per node: 2 ranks hold one
  // node each, 4 ranks two per node, 8 ranks one worker each). LoCo's
  // two-stage exchange, whose communicators depend on the rank count (the
  // node lies on one rank; a node communicator of 2, of 4), runs on 2, 4 and
  // 8 ranks; the other configurations take one rank count each, in turn, so
  // that every count runs every family and the matrix stays cheap (about a
  // minute on CI's 2 cores: 24 steps of a 212-parameter MLP). The flat and
  // hierarchical exchanges and per-tensor granularity run in the first test
  // case above on 2 and 4 ranks. The 1-bit family's non-default stages carry
  // their own wire images.
  TEST_CASE("parity matrix: every optimizer's default and every exchange option, 2/4/8 ranks") {
    struct Config {
      std::string optimizer;
      std::vector<int> ranks;
    };
    const std::vector<Config> matrix = {
        {R"({"name": "sgd"})", {2}},
        {R"({"name": "momentum_sgd"})", {4}},
        {R"({"name": "adam"})", {8}},
        {R"({"name": "lamb"})", {2}},
        {R"({"name": "onebit_adam"})", {4}},
        {R"({"name": "apmsqueeze"})", {8}},
        {R"({"name": "onebit_lamb"})", {2}},
        {R"({"name": "zero_one_adam"})", {4}},
        {R"({"name": "binsgdm"})", {8}},
        {R"({"name": "loco"})", {2, 4, 8}},  // two_stage on the network's 2 nodes
        // LoCo's reference exchange on 4 nodes of 2 (2 ranks: two whole nodes
        // a rank), stochastic rounding (partition images keep the stream's
        // draws), fp32 completion, the reference's node sum, fp32 errors.
        {R"({"name": "loco", "lr": 0.01, "node_size": 2, "rounding": "stochastic",
             "gather": "fp32", "node_reduce": "sum", "error_storage_bits": 32})",
         {2, 4, 8}},
        {R"({"name": "loco", "lr": 0.01, "exchange": "two_stage", "reset_T": 3})", {4}},
        // The 1-bit family's stages: each compressor's image on the wire.
        {R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 6,
             "worker_compressor": {"name": "nbit", "bits": 3, "rounding": "stochastic"},
             "server_compressor": {"name": "topk", "ratio": 0.25}})",
         {8}},
        {R"({"name": "onebit_lamb", "lr": 0.01, "freeze_step": 6,
             "worker_compressor": {"name": "randomk", "ratio": 0.5, "rescale": true},
             "server_compressor": {"name": "sign", "scale": "l1", "error_feedback": false},
             "granularity": "tensor"})",
         {2}},
        {R"({"name": "zero_one_adam", "lr": 0.01, "var_freeze_step": 6, "var_update_scaler": 2,
             "local_step_scaler": 2, "local_step_clipper": 4,
             "worker_compressor": {"name": "fp16"}, "server_compressor": {"name": "bf16"}})",
         {4}},
        {R"({"name": "apmsqueeze", "lr": 0.01, "freeze_step": 6,
             "worker_compressor": {"name": "randomk", "ratio": 0.25, "shared_seed": true},
             "server_compressor": {"name": "identity"}})",
         {8}},
        {R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 6, "error_feedback": false})", {2}},
    };
    for (const Config& c : matrix) {
      CAPTURE(c.optimizer);
      TempDir dir;
      const std::string file = dir.file("e.json", experiment(c.optimizer));
      const MpiReference ref = simulate(dir, file);
      for (const int ranks : c.ranks) {
        CAPTURE(ranks);
        Result r;
        const fs::path out = run_mpi(dir, file, ranks, r);
        CHECK(without_wall_column(slurp(out / "metrics.csv")) == ref.metrics);
        CHECK(slurp(out / "comm_log.csv") == ref.comm_log);
      }
    }
  }

  // Ranks whose workers straddle nodes (12 workers, 4 ranks of 3, nodes of 2):
  // LoCo's two stages run over the world communicator, each message still
  // from worker to worker. And a rank holding many workers (768 workers on 3
  // ranks of 256; 2 threads each for Adam, so each of the rank's largest
  // nodes is cut further for the threads): the gradients are streamed into the mean
  // (the tree's nodes inside each rank's block, here many, then the nodes
  // above them across the ranks) or, for 1-bit Adam's compressed steps,
  // folded into the worker stage, so no rank holds a row per worker.
  TEST_CASE("straddling nodes and many workers a rank: bit-identical, no gradient rows held") {
    struct Case {
      std::string optimizer, problem;
      int workers, ranks;
      const char* threads;
    };
    const std::vector<Case> cases = {
        {R"({"name": "loco", "lr": 0.01, "node_size": 2})",
         R"({"name": "mlp", "input_dim": 8, "hidden": 16, "classes": 4, "samples": 512})", 12, 4,
         "1"},
        {R"({"name": "adam", "lr": 0.01, "wire": "fp16"})", R"({"name": "quadratic", "dim": 300})",
         768, 3, "2"},
        {R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 4})",
         R"({"name": "quadratic", "dim": 300})", 768, 3, "1"},
    };
    for (const Case& c : cases) {
      CAPTURE(c.optimizer);
      TempDir dir;
      const std::string file =
          dir.file("e.json", R"({"name": "mpi-many", "seed": 4, "steps": 12, "eval_every": 4,
            "grad_norm_every": 3, "problem": )" + c.problem +
                                 R"(, "cluster": {"workers": )" + std::to_string(c.workers) +
                                 R"(, "batch_size": 4}, "optimizer": )" + c.optimizer + "}");
      // The reference on one thread (the bits do not depend on the count;
      // several threads only wait on each other on a busy 2-core machine).
      const fs::path sim = run_sim(dir, file + " --threads 1"), out = dir.path / "mpi";
      const Result r = run_shell(
          dir, std::string("OMP_NUM_THREADS=") + c.threads + " " + BITLAB_MPIEXEC +
                   " --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -x "
                   "OMP_NUM_THREADS -np " +
                   std::to_string(c.ranks) + " " + BITLAB_BINARY + " run " + file +
                   " --quiet --backend mpi --out " + out.string());
      REQUIRE_MESSAGE(r.status == 0, r.err);
      CHECK(without_wall_column(slurp(out / "metrics.csv")) ==
            without_wall_column(slurp(sim / "metrics.csv")));
      CHECK(slurp(out / "comm_log.csv") == slurp(sim / "comm_log.csv"));
      if (c.workers > 12) {
        // The rows would be 256 × 304 floats (d = 300 rounded up to 16);
        // the streamed mean holds a block of 16 rows per thread (an eighth
        // of them on 2 threads) and, per folded tree (adam's fp16 and fp32),
        // one buffer per node it folds (a few per maximum of the rank's
        // block) and the mean: under a third of the rows.
        const auto measured = bitlab::Json::parse(slurp(out / "summary.json"))["measured"];
        const auto bytes = measured["cluster_worker_buffer_bytes_rank0"].get<int64_t>();
        MESSAGE(c.optimizer << ": rank 0 holds " << bytes << " bytes of worker buffers");
        CHECK(bytes < 256 * 304 * 4 / 3);
      }
    }
  }

  // Real data sets, label-skewed shards: each rank reads only its workers'
  // training rows (Fashion-MNIST's images are streamed and the rest dropped),
  // rank 0 also the held-out set and the train_eval prefix; the metrics,
  // eval columns included, are the simulator's bit for bit.
  TEST_CASE("real data under mpirun: each rank holds its shard only, results bit-identical") {
    const std::vector<std::pair<std::string, std::string> > problems = {
        {"softmax_regression digits",
         R"({"name": "softmax_regression", "dataset": "digits", "train_eval_samples": 100})"},
        {"deep_mlp fashion_mnist",
         R"({"name": "deep_mlp", "dataset": "fashion_mnist", "widths": [16], "train_samples": 3000,
             "test_samples": 300, "train_eval_samples": 200})"},
    };
    for (const auto& [label, problem] : problems) {
      const std::string case_label = label;  // clang 14: no structured binding in CAPTURE
      CAPTURE(case_label);
      TempDir dir;
      const std::string file = dir.file("e.json", R"({"name": "mpi-real", "seed": 5, "steps": 12,
          "eval_every": 6, "problem": )" + problem + R"(,
          "cluster": {"workers": 8, "batch_size": 16, "sharding": "label_skew",
                      "dirichlet_alpha": 1.0},
          "optimizer": {"name": "onebit_adam", "lr": 0.003, "freeze_step": 4, "eps": 1e-4}})");
      const std::string metrics = without_wall_column(slurp(run_sim(dir, file) / "metrics.csv"));
      // digits: 1797 minus the stratified 25 % held out (rounded per class).
      const size_t train = label.rfind("softmax", 0) == 0 ? 1346 : 3000;
      for (const int ranks : {2, 4}) {
        CAPTURE(ranks);
        Result r;
        const fs::path out = run_mpi(dir, file, ranks, r);
        CHECK(without_wall_column(slurp(out / "metrics.csv")) == metrics);
        const auto measured = bitlab::Json::parse(slurp(out / "summary.json"))["measured"];
        CHECK(measured["train_samples"].get<size_t>() == train);
        // Label-skewed shards are uneven, so the bound is loose: no rank but
        // 0 holds more than its share plus a margin, and rank 0 (its share and
        // the eval prefix) less than everything.
        const auto others = measured["train_samples_held_max_other_rank"].get<size_t>();
        const auto rank0 = measured["train_samples_held_rank0"].get<size_t>();
        CHECK(others > 0);
        CHECK(others < train);
        CHECK(rank0 < train);
        CHECK(rank0 >= 100);
        MESSAGE(label << ", " << ranks << " ranks: rank 0 holds " << rank0 << " of " << train
                      << " training samples, the largest other rank " << others);
      }
    }
  }

  // Only rank 0 reads the held-out files: when they are missing, every rank
  // stops (no rank waits in an exchange) and the message is printed once.
  TEST_CASE("an error only rank 0 sees (missing held-out files) stops every rank, exit 2") {
    TempDir dir;
    const fs::path data = dir.path / "fmnist";
    fs::create_directories(data);
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"}) {
      fs::create_symlink(fs::path("/usr/share/datasets/fashion-mnist") / f, data / f);
    }
    const std::string file = dir.file("e.json", R"({"name": "mpi-missing", "steps": 2,
        "problem": {"name": "softmax_regression", "dataset": "fashion_mnist", "data_dir": ")" +
                                                    data.string() + R"(", "train_samples": 400},
        "cluster": {"workers": 4, "batch_size": 8},
        "optimizer": {"name": "adam"}})");
    const fs::path out = dir.path / "run";
    const Result r = run_shell(dir, mpirun(2) + BITLAB_BINARY + " run " + file +
                                        " --quiet --backend mpi --out " + out.string());
    CHECK(r.status == 2);
    const std::string missing = (data / "t10k-images-idx3-ubyte.gz").string() + ": not found";
    CHECK(r.err.find(missing) != std::string::npos);
    // Printed once, by rank 0.
    CHECK(r.err.find(missing) == r.err.rfind(missing));
    CHECK_FALSE(fs::exists(out));
  }

  // What crosses between ranks is the compressed messages themselves: for a
  // step in the compressed phase rank 0's count of bytes handed to MPI equals
  // the count derived by hand from the exchange layout. The same wire sizes
  // are read back from comm_log.csv, so measured and logged bytes are tied.
  TEST_CASE(
      "bytes handed to MPI are the compressed messages (1-bit Adam, LoCo flat and hierarchical; 4 "
      "ranks)") {
    // n = 8 workers on R = 4 ranks: b = 2 workers per rank; the MLP has
    // d = (8·16 + 16) + (16·4 + 4) = 212 parameters.
    const int64_t n = 8, ranks = 4, b = n / ranks, d = 212;
    // Every step: the losses (one double per worker) are allgathered, each
    // rank sending its b losses to the R−1 others.
    const int64_t losses = (ranks - 1) * b * 8;
    // Steps with grad_norm (every 4th): the exact fp32 mean over ranks — each
    // rank reduces d/R elements: it sends its b rows' slice of every other
    // rank (alltoall) and its reduced slice to every other rank (allgather).
    // 1-bit Adam streams its gradients (its fp32 mean folded for grad_norm):
    // rank 0 sends one node of the tree (its block's sum) instead of b rows.
    const int64_t grad_norm = (ranks - 1) * b * (d / ranks) * 4 + (ranks - 1) * (d / ranks) * 4;
    const int64_t streamed_grad_norm =
        (ranks - 1) * 1 * (d / ranks) * 4 + (ranks - 1) * (d / ranks) * 4;
    const auto row = [](const std::string& csv, int64_t step) {
      std::istringstream in(csv);
      std::string line;
      std::vector<std::string> out;
      while (std::getline(in, line)) {
        if (line.rfind(std::to_string(step) + ",", 0) == 0) out.push_back(line);
      }
      return out;
    };
    const auto field = [](const std::string& line, int column) {
      std::istringstream in(line);
      std::string cell;
      for (int k = 0; k <= column; ++k) std::getline(in, cell, ',');
      return std::stoll(cell);
    };
    struct Case {
      std::string optimizer;
      int64_t compressed_step_bytes;  // rank 0, a compressed step without grad_norm
      std::vector<int64_t> payloads;  // the step's comm_log payload_bytes, in order
      int64_t grad_norm_bytes;        // rank 0, what a grad_norm step adds
    };
    // 1-bit Adam after freeze_step 8: D = d padded to a multiple of
    // n·lcm(n, 8) = 64 → 256, server chunk D/n = 32 signs = 4 bytes.
    // Phase 1: alltoall of sign chunks — rank 0 sends its b workers' chunks
    // for the b servers of each other rank: (R−1)·b·b·4 — and allgather of
    // its b fp32 scales: (R−1)·b·4. Phase 2: allgather of its b servers'
    // sign chunks (R−1)·b·4 and scales (R−1)·b·4.
    const int64_t onebit_chunk = 256 / 8 / n;
    const int64_t onebit = (ranks - 1) * b * b * onebit_chunk + (ranks - 1) * b * 4 +
                           (ranks - 1) * b * onebit_chunk + (ranks - 1) * b * 4;
    // LoCo (4-bit codes, groups of 128, fp16 gather): D = d padded to a
    // multiple of n·128 → 1024, chunk 128 elements. Alltoall message of one
    // (worker, server) pair: 128·4/8 = 64 bytes of codes + one fp32 scale =
    // 68, rank 0 sending (R−1)·b·b of them; allgather of its b averaged
    // chunks as fp16: (R−1)·b·128·2.
    const int64_t loco_msg = 128 * 4 / 8 + 4;
    const int64_t loco = (ranks - 1) * b * b * loco_msg + (ranks - 1) * b * 128 * 2;
    // Hierarchical LoCo (node_size g = 4: nodes {ranks 0, 1} and {2, 3}):
    // one image of d = 212 values is 212·4/8 = 106 bytes of codes + 2 group
    // scales·4 = 114. Rank 0 (node 0's leader) sends its b images to the
    // other rank of its node (stage 1, node communicator), its node's image to
    // the other leader (stage 2, leaders' communicator: one image per node
    // crosses nodes) and the 2 gathered node images to the other rank of its
    // node (stage 3, node broadcast).
    const int64_t image = 212 * 4 / 8 + 2 * 4;
    const int64_t hierarchical = b * image * (4 / b - 1) + image + 2 * image;
    const std::vector<Case> cases = {
        {R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 8})",
         losses + onebit,
         {n * onebit_chunk, 4 * n, n * onebit_chunk, 4 * n},
         streamed_grad_norm},
        {R"({"name": "loco", "lr": 0.01, "exchange": "flat"})",
         losses + loco,
         {n * loco_msg, n * 128 * 2},
         grad_norm},
        {R"({"name": "loco", "lr": 0.01, "exchange": "allgather", "node_size": 4})",
         losses + hierarchical,
         {4 * image, 2 * image, 2 * image},
         grad_norm},
    };
    for (const Case& c : cases) {
      CAPTURE(c.optimizer);
      TempDir dir;
      const std::string file = dir.file("e.json", experiment(c.optimizer));
      const fs::path out = dir.path / "mpi4";
      const Result r = run_shell(dir, mpirun(4) + BITLAB_BINARY + " run " + file +
                                          " --quiet --backend mpi --out " + out.string());
      REQUIRE_MESSAGE(r.status == 0, r.err);
      const std::string transport = slurp(out / "transport.csv");
      // Step 9: compressed, no grad_norm; step 12: compressed with grad_norm.
      REQUIRE(row(transport, 9).size() == 1);
      CHECK(field(row(transport, 9)[0], 2) == c.compressed_step_bytes);
      CHECK(field(row(transport, 12)[0], 2) == c.compressed_step_bytes + c.grad_norm_bytes);
      // The logged (modelled) exchange of the same step has the wire sizes
      // used above: payload_bytes is column 7 of comm_log.csv.
      const std::vector<std::string> logged = row(slurp(out / "comm_log.csv"), 9);
      REQUIRE(logged.size() == c.payloads.size());
      for (size_t k = 0; k < logged.size(); ++k) CHECK(field(logged[k], 7) == c.payloads[k]);
    }
  }

  // 12 workers on 4 ranks (b = 3) with node_size 2: g is neither a multiple
  // nor a divisor of b, so the hierarchical allgather falls back to every
  // worker's image over the world communicator, and each rank forms every
  // node's mean itself — from its own rows where the node lies on the rank
  // (node 0 = workers 0, 1 on rank 0), else streamed from the received
  // images (node 1 = workers 2, 3 straddles ranks 0 and 1) — holding no node
  // rows: bit-identical to the simulator all the same.
  TEST_CASE("baseline twin under mpirun: the run and its twin bit-identical to the simulator's") {
    // 1-bit Adam's twin is 1-bit Adam uncompressed, run first over the same
    // 2 ranks into twin/; the summary's "baseline" (gaps, bytes ratio,
    // speed-up) follows from the two runs' files alone, so it must match too.
    TempDir dir;
    const std::string text = experiment(R"({"name": "onebit_adam", "lr": 0.01, "freeze_step": 8})");
    bitlab::Json j = bitlab::Json::parse(text);
    j["baseline"] = "twin";
    const std::string file = dir.file("e.json", j.dump());
    const fs::path sim = run_sim(dir, file);
    Result r;
    const fs::path mpi = run_mpi(dir, file, 2, r);
    for (const char* sub : {"", "twin"}) {
      CAPTURE(sub);
      CHECK(without_wall_column(slurp(mpi / sub / "metrics.csv")) ==
            without_wall_column(slurp(sim / sub / "metrics.csv")));
      CHECK(slurp(mpi / sub / "comm_log.csv") == slurp(sim / sub / "comm_log.csv"));
    }
    const bitlab::Json a = bitlab::Json::parse(slurp(sim / "summary.json"))["baseline"];
    const bitlab::Json b = bitlab::Json::parse(slurp(mpi / "summary.json"))["baseline"];
    CHECK(a["gap"] == b["gap"]);
    CHECK(a["bytes_ratio"] == b["bytes_ratio"]);
    CHECK(a["speedup"] == b["speedup"]);
    CHECK(b["status"] == "completed");
  }

  TEST_CASE("--barrier-before-exchanges: the same results, the waiting timed apart, the streamed mean's exchange counted") {
    // Adam streams the gradients' mean: its exchange across ranks happens
    // while the gradients are folded, outside the optimizer's step, and must
    // still count in mpi_comm_s (it read 0 there before).
    TempDir dir;
    const std::string file = dir.file("e.json", experiment(R"({"name": "adam", "lr": 0.01})"));
    const MpiReference ref = simulate(dir, file);
    // Column `name` of transport.csv, one value a step.
    const auto column = [](const std::string& csv, const std::string& name) {
      std::istringstream in(csv);
      std::string line, cell;
      std::getline(in, line);
      std::istringstream head(line);
      int at = 0, k = 0;
      for (; std::getline(head, cell, ','); ++k) if (cell == name) at = k;
      std::vector<double> out;
      while (std::getline(in, line)) {
        std::istringstream row(line);
        for (int c = 0; std::getline(row, cell, ','); ++c) if (c == at) out.push_back(std::stod(cell));
      }
      return out;
    };
    for (const bool barrier : {false, true}) {
      CAPTURE(barrier);
      const fs::path out = dir.path / (barrier ? "barrier" : "plain");
      const Result r = run_shell(dir, mpirun(2) + BITLAB_BINARY + " run " + file +
                                          " --quiet --backend mpi --out " + out.string() +
                                          (barrier ? " --barrier-before-exchanges" : ""));
      REQUIRE_MESSAGE(r.status == 0, r.err);
      CHECK(without_wall_column(slurp(out / "metrics.csv")) == ref.metrics);
      CHECK(slurp(out / "comm_log.csv") == ref.comm_log);
      CHECK(slurp(out / "summary.json").find("\"gradients\": \"streamed_mean\"") != std::string::npos);
      const std::string transport = slurp(out / "transport.csv");
      CHECK(transport.find(",mpi_comm_s_rank0,mpi_comm_s_max,mpi_wait_s_rank0\n") != std::string::npos);
      const auto comm = column(transport, "mpi_comm_s_rank0");
      const auto wait = column(transport, "mpi_wait_s_rank0");
      REQUIRE(comm.size() == 24);
      REQUIRE(wait.size() == 24);
      for (size_t k = 0; k < comm.size(); ++k) {
        CAPTURE(k);
        CHECK(comm[k] > 0);  // every step exchanges the mean across ranks
        // A barrier takes some time even when the ranks arrive together.
        if (barrier) CHECK(wait[k] > 0);
        else CHECK(wait[k] == 0);
      }
    }
    // The simulator has nothing to wait for: the flag is refused.
    const Result r = run_bitlab(dir, "run " + file + " --barrier-before-exchanges --out " +
                                         (dir.path / "refused").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("--barrier-before-exchanges: only with --backend mpi") != std::string::npos);
    CHECK_FALSE(fs::exists(dir.path / "refused"));
  }

  TEST_CASE("checkpoint and --resume under mpirun: every rank's state, the same files as without a stop") {
    // A 2-rank run checkpoints every 8 of 24 steps (the last at step 16). With
    // its summary removed it looks like a run killed after step 16; resumed
    // over 2 ranks its files must be those of the run that never stopped, and
    // those are the simulator's. LoCo holds per-worker error rows: each rank
    // must get back its own block.
    TempDir dir;
    const std::string file = dir.file(
        "e.json", experiment(R"({"name": "loco", "lr": 0.05, "exchange": "flat"})"));
    const MpiReference ref = simulate(dir, file);
    const fs::path out = dir.path / "ckpt";
    const std::string run = mpirun(2) + BITLAB_BINARY + " run --quiet --backend mpi ";
    Result r = run_shell(dir, run + file + " --checkpoint-every 8 --out " + out.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    REQUIRE(fs::exists(out / "checkpoint.bin"));
    fs::remove(out / "summary.json");
    r = run_shell(dir, run + "--resume " + out.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(without_wall_column(slurp(out / "metrics.csv")) == ref.metrics);
    CHECK(slurp(out / "comm_log.csv") == ref.comm_log);
    CHECK(bitlab::Json::parse(slurp(out / "summary.json"))["resumed_from_step"] == 16);
    // Another rank count cannot take the blocks over: exit 2, naming both.
    fs::remove(out / "summary.json");
    r = run_shell(dir, mpirun(4) + BITLAB_BINARY + " run --quiet --backend mpi --resume " +
                           out.string());
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find("written by 2 MPI ranks, this run has 4") != std::string::npos, r.err);
  }

  TEST_CASE("hierarchical fallback (12 workers, 4 ranks, node_size 2): bit-identical") {
    const std::vector<std::pair<std::string, int64_t> > cases = {
        // m, b, z and C(z_i): 4 rows of the 3 workers.
        {R"({"name": "binsgdm", "lr": 0.01, "node_size": 2})", 4 * 3 * 224 * 4},
        // h_i (224), e_i (212) and C(h_i) (224) of the 3 workers.
        {R"({"name": "loco", "lr": 0.01, "exchange": "allgather", "node_size": 2})",
         3 * (224 + 212 + 224) * 4},
    };
    for (const auto& [optimizer, state_bytes] : cases) {
      const std::string case_optimizer = optimizer;  // clang 14: no structured binding in CAPTURE
      CAPTURE(case_optimizer);
      TempDir dir;
      std::string json = experiment(optimizer);
      const std::string eight = "\"workers\": 8";
      REQUIRE(json.find(eight) != std::string::npos);
      json.replace(json.find(eight), eight.size(), "\"workers\": 12");
      const std::string file = dir.file("e.json", json);
      const fs::path sim = dir.path / "sim", mpi = dir.path / "mpi4";
      const Result base = run_bitlab(dir, "run " + file + " --quiet --out " + sim.string());
      REQUIRE_MESSAGE(base.status == 0, base.err);
      const Result r = run_shell(dir, mpirun(4) + BITLAB_BINARY + " run " + file +
                                          " --quiet --backend mpi --out " + mpi.string());
      REQUIRE_MESSAGE(r.status == 0, r.err);
      CHECK(without_wall_column(slurp(mpi / "metrics.csv")) ==
            without_wall_column(slurp(sim / "metrics.csv")));
      CHECK(slurp(mpi / "comm_log.csv") == slurp(sim / "comm_log.csv"));
      CHECK(slurp(mpi / "summary.json")
                .find("\"optimizer_worker_state_bytes_rank0\": " + std::to_string(state_bytes)) !=
            std::string::npos);
    }
  }

  // Run on every rank by the next test case (under mpirun, with
  // BITLAB_MPI_RANK_TEST set); on its own it only says so.
  TEST_CASE("mpi rank: Communicator::allgather and broadcast equal the simulator's") {
    if (std::getenv("BITLAB_MPI_RANK_TEST") == nullptr) {
      MESSAGE("nothing to do outside mpirun: the next test case runs this one on 4 ranks");
      return;
    }
    const std::unique_ptr<bitlab::Transport> transport = bitlab::make_mpi_transport();
    const int n = 8, ranks = transport->ranks();
    const size_t len = 37;  // odd: no row ends on a word boundary in 16 bits
    // Every worker's row, the same on every rank (seeded by worker), scaled so
    // that fp16 has values to round, subnormals and overflows (|x| > 65504).
    std::vector<float> all(len * n);
    for (int i = 0; i < n; ++i) {
      bitlab::fill_normal(bitlab::RngStream(11, bitlab::Purpose::kTest, i),
                          std::span<float>(all.data() + i * len, len), 3e4f);
      all[i * len] = 1e-7f * static_cast<float>(i + 1);
    }
    for (const bitlab::WireDtype wire :
         {bitlab::WireDtype::kFp32, bitlab::WireDtype::kFp16, bitlab::WireDtype::kBf16}) {
      CAPTURE(bitlab::wire_dtype_name(wire));
      bitlab::Communicator sim(n), mpi(n, transport.get());
      const bitlab::WorkerRange mine = mpi.local_workers();
      const int b = mine.size();
      const int64_t elem = bitlab::wire_dtype_bytes(wire);
      // The simulator holds all rows; the rank its own block's.
      std::vector<float> rows(all.begin() + mine.begin * len, all.begin() + mine.end * len);
      const bitlab::WorkerBuffers every{all.data(), len, len, n};
      const bitlab::WorkerBuffers own{rows.data(), len, len, n, mine.begin, b};
      std::vector<float> want(len * n), got(len * n);
      sim.allgather(every, want, wire);
      int64_t before = transport->stats().bytes_sent;
      mpi.allgather(own, got, wire);
      CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
      // Its b rows to each of the other ranks, elem bytes a value.
      CHECK(transport->stats().bytes_sent - before == (ranks - 1) * b * int64_t{len} * elem);
      // Broadcast of worker 5's row (rank 2's with 4 ranks).
      std::vector<float> sim_rows = all;
      sim.broadcast({sim_rows.data(), len, len, n}, 5, wire);
      before = transport->stats().bytes_sent;
      mpi.broadcast(own, 5, wire);
      CHECK(std::memcmp(rows.data(), sim_rows.data() + mine.begin * len,
                        rows.size() * sizeof(float)) == 0);
      const int64_t sent = mpi.owner(5) == mpi.rank() ? (ranks - 1) * int64_t{len} * elem : 0;
      CHECK(transport->stats().bytes_sent - before == sent);
      // The logs (what the network model prices) are the same.
      REQUIRE(mpi.log().size() == 2);
      for (size_t k = 0; k < 2; ++k) {
        CHECK(std::string(mpi.log().records()[k].dtype) == sim.log().records()[k].dtype);
        CHECK(mpi.log().records()[k].payload_bytes == sim.log().records()[k].payload_bytes);
      }
    }
    MESSAGE("rank " << transport->rank() << " of " << ranks << ": allgather and broadcast checked");
  }

  TEST_CASE(
      "Communicator::allgather / broadcast across 4 ranks: wire dtype on MPI, simulator's values") {
    run_rank_case(4, "mpi rank: Communicator::allgather*", ": allgather and broadcast checked");
  }

  // Run on every rank by the next test case (under mpirun, with
  // BITLAB_MPI_RANK_TEST set); on its own it only says so.
  TEST_CASE("mpi rank: after a warm-up, steps allocate nothing") {
    if (std::getenv("BITLAB_MPI_RANK_TEST") == nullptr) {
      MESSAGE("nothing to do outside mpirun: the next test case runs this one on 2 and 4 ranks");
      return;
    }
    const std::unique_ptr<bitlab::Transport> transport = bitlab::make_mpi_transport();
    for (const char* const* o = steady_step_optimizers(); *o != nullptr; ++o) {
      const std::string optimizer = *o;
      CAPTURE(optimizer);
      CHECK(steady_step_allocations(*o, transport.get()) == 0);
    }
    MESSAGE("rank " << transport->rank() << ": steady steps checked");
  }

  TEST_CASE("under MPI, steps allocate nothing once sizes are steady (2 and 4 ranks)") {
    for (const int ranks : {2, 4}) {
      CAPTURE(ranks);
      run_rank_case(ranks, "mpi rank: after a warm-up*", ": steady steps checked");
    }
  }

  // A user who forgets --backend mpi would have every rank run the whole
  // simulation into one folder: refused, said once.
  TEST_CASE("mpirun without --backend mpi: exit 2, one message, no results") {
    TempDir dir;
    const std::string file = dir.file("e.json", experiment(R"({"name": "adam"})"));
    const fs::path out = dir.path / "run";
    const Result r = run_shell(
        dir, mpirun(2) + BITLAB_BINARY + " run " + file + " --quiet --out " + out.string());
    check_refused_once(r, "--backend sim under an MPI launcher (2 processes", out);
  }

  // Every rank must stop at the same step boundary (rank 0 may never have
  // seen the signal), rank 0 must write the interrupted summary with every
  // completed step in metrics.csv, and each rank must exit 128 + the signal
  // it agreed on. The rows must be those of `bitlab run` for as many steps:
  // stopping changes nothing before it.
  TEST_CASE("Ctrl-C under mpirun: every rank stops at one step, interrupted summary") {
    struct Case {
      const char* name;
      int target;  // 0: mpirun's process group, 1: mpirun alone, 2: rank 1 alone
      int sig;     // the signal the ranks receive
    };
    const Case cases[] = {{"SIGINT to mpirun's process group", 0, SIGTERM},
                          {"SIGINT to mpirun alone", 1, SIGTERM},
                          {"SIGINT to rank 1 alone", 2, SIGINT}};
    for (const Case& c : cases) {
      INFO(std::string(c.name));
      TempDir dir;
      const std::string file = dir.file("long.json", R"({"steps": 100000000, "eval_every": 1,
        "problem": {"name": "quadratic", "dim": 1000}, "cluster": {"workers": 2},
        "optimizer": {"name": "sgd", "lr": 0.01}})");
      const fs::path out = dir.path / "mpi";
      const pid_t pid = start_mpi_run(dir, file, out);
      // Under way: a few rows written, both ranks started.
      REQUIRE(wait_for_file(out / "metrics.csv", 2000));
      REQUIRE(wait_for_file(dir.path / "rank-1.pid", 2));
      if (c.target == 2) {
        kill(-std::stoi(slurp(dir.path / "rank-1.pid")), SIGINT);
      } else {
        kill(c.target == 0 ? -pid : pid, SIGINT);
      }
      const int mpirun_status = wait_for_mpirun(pid);
      // Open MPI's mpirun exits 1 when it was signalled itself, and otherwise
      // passes on the ranks' status.
      CHECK(mpirun_status == (c.target == 2 ? 128 + SIGINT : 1));
      for (const char* rank : {"rank-0.status", "rank-1.status"}) {
        REQUIRE_MESSAGE(wait_for_file(dir.path / rank, 2), slurp(dir.path / "mpirun.err"));
        CHECK(std::stoi(slurp(dir.path / rank)) == 128 + c.sig);
      }
      const bitlab::Json s = bitlab::Json::parse(slurp(out / "summary.json"));
      CHECK(s["status"] == "interrupted");
      CHECK(s["signal"] == (c.sig == SIGINT ? "SIGINT" : "SIGTERM"));
      const int64_t steps = s["steps_completed"].get<int64_t>();
      const std::string rows = slurp(out / "metrics.csv");
      CHECK(std::count(rows.begin(), rows.end(), '\n') == steps + 1);
      const fs::path sim = run_sim(dir, file + " --set steps=" + std::to_string(steps));
      CHECK(without_wall_column(rows) == without_wall_column(slurp(sim / "metrics.csv")));
    }
  }

  // A sweep spread by mpirun: each rank runs its share (--shard auto) in the
  // shared folder — starting together, so the folder's files are written
  // concurrently — and one --merge gives the unsharded sweep.csv. Without
  // --shard, mpirun is refused.
  TEST_CASE("mpirun -np 2 bitlab sweep --shard auto, then --merge: the unsharded sweep.csv") {
    TempDir dir;
    dir.file("base.json", experiment(R"({"name": "adam", "lr": 0.01})"));
    const std::string file = dir.file(
        "s.json",
        R"({"base": "base.json", "grid": {"optimizer.lr": [0.01, 0.02]}, "seeds": [1, 2]})");
    const std::string whole = (dir.path / "whole").string(), out = (dir.path / "sharded").string();
    REQUIRE(run_bitlab(dir, "sweep " + file + " --out " + whole + " --quiet --jobs 1").status == 0);
    const std::string sweep = std::string(BITLAB_BINARY) + " sweep " + file + " --out " + out;
    const Result refused = run_shell(dir, mpirun(2) + sweep + " --quiet");
    CHECK(refused.status == 2);
    CHECK(refused.err.find("without --shard") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    const Result r = run_shell(dir, mpirun(2) + sweep + " --quiet --jobs 1 --shard auto");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(fs::exists(fs::path(out) / "sweep.shard-0-of-2.csv"));
    CHECK(fs::exists(fs::path(out) / "sweep.shard-1-of-2.csv"));
    const Result merged = run_bitlab(dir, "sweep " + file + " --out " + out + " --merge");
    REQUIRE_MESSAGE(merged.status == 0, merged.err);
    // sweep.csv without its wall_s column (the only non-deterministic one),
    // found by the header's name (columns such as warnings follow it; no cell
    // of this sweep holds a comma).
    const auto strip = [](const std::string& csv) {
      std::string o;
      std::istringstream in(csv);
      size_t wall_column = std::string::npos;
      for (std::string line; std::getline(in, line);) {
        std::vector<std::string> cells;
        std::istringstream row(line);
        for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
        if (!line.empty() && line.back() == ',') cells.emplace_back();
        if (wall_column == std::string::npos) {
          wall_column = static_cast<size_t>(std::find(cells.begin(), cells.end(), "wall_s") - cells.begin());
        }
        for (size_t c = 0; c < cells.size(); ++c) {
          if (c != wall_column) o += cells[c] + ",";
        }
        o += "\n";
      }
      return o;
    };
    CHECK(strip(slurp(fs::path(out) / "sweep.csv")) == strip(slurp(fs::path(whole) / "sweep.csv")));
  }

  TEST_CASE("workers not divisible by the ranks: exit 2, one message, no results") {
    TempDir dir;
    const std::string file = dir.file("e.json", experiment(R"({"name": "adam"})"));
    const fs::path out = dir.path / "run";
    const Result r = run_shell(
        dir, mpirun(3) + BITLAB_BINARY + " run " + file + " --backend mpi --out " + out.string());
    check_refused_once(r, "cluster.workers = 8: must be a multiple of the number of MPI ranks",
                       out);
    // A node size that does not divide the workers: the same message as the
    // simulator's, once.
    const std::string loco =
        dir.file("loco.json", experiment(R"({"name": "loco", "node_size": 3})"));
    const Result node = run_shell(
        dir, mpirun(2) + BITLAB_BINARY + " run " + loco + " --backend mpi --out " + out.string());
    check_refused_once(node, "optimizer.node_size = 3", out);
  }
#endif
}
