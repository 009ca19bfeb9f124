// End-to-end tests of the `bitlab` binary: exit statuses, messages on stderr,
// and what lands (or must not land) on disk.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "sim/core/isa.hpp"
#include "sim/core/schema.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using bitlab::Json;

using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;
using bitlab::testing::without_wall_column;

namespace {

// A scratch folder per test case, removed at the end.
const char* kGood = R"({
  "name": "cli", "steps": 30, "eval_every": 10, "seed": 3,
  "problem": {"name": "logistic", "dim": 5, "samples": 256},
  "cluster": {"workers": 4, "batch_size": 8},
  "optimizer": {"name": "adam", "lr": 0.05}
})";

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("run writes a complete, self-describing results folder") {
    TempDir d;
    const auto file = d.file("exp.json", kGood);
    const auto out = (d.path / "run").string();
    Result r = run_bitlab(d, "run " + file + " --out " + out + " --quiet");
    REQUIRE(r.status == 0);
    CHECK(r.out == out + "\n");  // stdout: the folder, for scripts
    for (const char* f :
         {"config.json", "manifest.json", "metrics.csv", "comm_log.csv", "summary.json"}) {
      CHECK(fs::exists(fs::path(out) / f));
    }
    CHECK_FALSE(fs::exists(fs::path(out) / ".bitlab.lock"));  // held while running only
    const Json summary = Json::parse(slurp(fs::path(out) / "summary.json"));
    CHECK(summary["status"] == "completed");
    CHECK(summary["steps_completed"] == 30);
    CHECK(summary["phases"]["full"]["steps"] == 30);
    const Json config = Json::parse(slurp(fs::path(out) / "config.json"));
    CHECK(config["optimizer"]["beta1"] == 0.9);  // defaults are filled in
    const Json manifest = Json::parse(slurp(fs::path(out) / "manifest.json"));
    CHECK(manifest["seed"] == 3);
    CHECK(manifest.contains("git_revision"));
    // header + 30 rows; eval columns filled at steps 10, 20, 30 only
    std::istringstream metrics(slurp(fs::path(out) / "metrics.csv"));
    std::string line;
    std::getline(metrics, line);
    CHECK(line.rfind("step,phase,train_loss,grad_norm,eval_loss,eval_accuracy", 0) == 0);
    int rows = 0;
    while (std::getline(metrics, line)) ++rows;
    CHECK(rows == 30);
    // ring allreduce of d+1 = 6 floats over 4 workers: 2*3/4*24 = 36 bytes a step
    CHECK(summary["totals"]["bytes_sent_per_worker"] == 36.0 * 30);

    // Same config and seed: the same metrics, but for the wall-time column.
    const auto out2 = (d.path / "run2").string();
    REQUIRE(run_bitlab(d, "run " + file + " --out " + out2 + " --quiet --threads 1").status == 0);
    CHECK(without_wall_column(slurp(fs::path(out) / "metrics.csv")) ==
          without_wall_column(slurp(fs::path(out2) / "metrics.csv")));
    CHECK(slurp(fs::path(out) / "comm_log.csv") == slurp(fs::path(out2) / "comm_log.csv"));

    // --out onto an existing run is refused (nothing lost)
    r = run_bitlab(d, "run " + file + " --out " + out + " --quiet");
    CHECK(r.status == 2);
    CHECK(r.err.find("already holds a run") != std::string::npos);
  }

  TEST_CASE("every instruction set the hot loops dispatch to gives the same metrics") {
    // Noisy gradients (Gaussian noise drawn by fill_normal on every element of
    // every worker, every step) and 1-bit Adam's compression: forced through
    // BITLAB_ISA, each variant this CPU has, at 1 and 2 threads, must write
    // metrics.csv (but for wall time) and comm_log.csv identical to SSE2's.
    TempDir d;
    const auto file = d.file("noisy.json", R"({
      "name": "isa", "steps": 12, "eval_every": 4, "seed": 5,
      "problem": {"name": "quadratic", "dim": 1003, "noise": 0.1},
      "cluster": {"workers": 4},
      "optimizer": {"name": "onebit_adam", "lr": 0.01, "freeze_step": 4}
    })");
    const auto ref = (d.path / "sse2").string();
    REQUIRE(
        run_bitlab(d, "run " + file + " --out " + ref + " --quiet --threads 2", "BITLAB_ISA=sse2")
            .status == 0);
    const std::string ref_metrics = without_wall_column(slurp(fs::path(ref) / "metrics.csv"));
    CHECK(ref_metrics.find("nan") == std::string::npos);
    for (bitlab::Isa isa : bitlab::supported_isas()) {
      for (int threads : {1, 2}) {
        const std::string name = std::string(bitlab::isa_name(isa)) + std::to_string(threads);
        const auto out = (d.path / name).string();
        INFO(name);
        REQUIRE(run_bitlab(d,
                           "run " + file + " --out " + out + " --quiet --threads " +
                               std::to_string(threads),
                           std::string("BITLAB_ISA=") + bitlab::isa_name(isa))
                    .status == 0);
        CHECK(without_wall_column(slurp(fs::path(out) / "metrics.csv")) == ref_metrics);
        CHECK(slurp(fs::path(out) / "comm_log.csv") == slurp(fs::path(ref) / "comm_log.csv"));
      }
    }
    const Result bad =
        run_bitlab(d, "run " + file + " --out " + (d.path / "bad").string(), "BITLAB_ISA=neon");
    CHECK(bad.status == 2);
    CHECK(bad.err.find("BITLAB_ISA = \"neon\": must be one of sse2, avx2, avx512") !=
          std::string::npos);
    CHECK_FALSE(fs::exists(d.path / "bad"));
  }

  TEST_CASE("bad input: exit status 2, one clear message, no results folder") {
    TempDir d;
    struct Case {
      std::string content;
      std::string args;  // extra flags
      std::string expect;
    };
    const std::vector<Case> cases = {
        {"{\n  \"steps\": 5,\n  \"seed\": ,\n}", "", "exp.json:3:11: JSON syntax error"},
        {R"({"stepz": 5, "problem": {"name": "logistic"}, "optimizer": {"name": "adam"}})", "",
         "stepz = 5: unknown key; did you mean \"steps\"?"},
        {R"({"steps": "5", "problem": {"name": "logistic"}, "optimizer": {"name": "adam"}})", "",
         "steps = \"5\": must be an integer"},
        {R"({"problem": {"name": "logistic"}, "optimizer": {"name": "adam", "beta1": 1.0}})", "",
         "optimizer.beta1 = 1.0: must be in [0, 1)"},
        {R"({"problem": {"name": "logistic"}, "optimizer": {"name": "adamw2"}})", "",
         "optimizer.name = \"adamw2\": must be one of"},
        {R"({"problem": {"name": "quadratc"}, "optimizer": {"name": "adam"}})", "",
         "did you mean \"quadratic\"?"},
        {kGood, "--set optimizer.betaa=0.5",
         "--set optimizer.betaa=0.5: optimizer.betaa = 0.5: unknown key"},
        {kGood, "--set cluster.workers=100000",
         "cluster.workers = 100000: must be <= the problem's 256 training samples"},
        {kGood, "--threads 0", "--threads"},
        {kGood, "--bogus", "--bogus"},
        // Hostile input: refused with exit 2, never a crash or an internal error.
        {std::string(10000, '[') + std::string(10000, ']'), "",
         "exp.json: JSON nested deeper than 64 levels"},
        {R"({"description": )" + std::string(10000, '[') + std::string(10000, ']') + "}", "",
         "exp.json: JSON nested deeper than 64 levels"},
        {kGood, "--set description=" + std::string(5000, '[') + std::string(5000, ']'),
         "JSON nested deeper than 64 levels"},
        {R"({"steps": 5, "steps": 6, "problem": {"name": "logistic"}})", "",
         "exp.json: key \"steps\" appears twice in one object"},
        {kGood, "--set optimizer.lr=1e400", "--set optimizer.lr=1e400: number overflow"},
        {kGood, "--set \"optimizer.lr=$(printf '\\377\\376')\"",
         "--set optimizer.lr=...: the value is not valid UTF-8 text"},
        {kGood, "--set \"optimizer.name=ad$(printf '\\377')am\"",
         "--set optimizer.name=...: the value is not valid UTF-8 text"},
        // found by fuzz_experiment: a stray byte in the path, not the value
        {kGood, "--set \"optimizer.l$(printf '\\226')r=0.1\"",
         "--set ...=0.1: the path is not valid UTF-8 text"},
        // 2^20 workers × 2^22 parameters: 17.6 TB of gradient rows, refused
        // before anything is allocated (no machine this runs on has it). 1-bit
        // Adam streams the gradients too (take_gradient), but its state is an
        // error row per worker over the buffer padded as DeepSpeed pads it, to
        // a multiple of n·lcm(n, 8) = 2^40 for n = 2^20: 2^20 rows of 2^40
        // floats (2^62 B = 4.61 EB) and their signs (2^57 B = 0.14 EB).
        {R"({"problem": {"name": "quadratic", "dim": 4194304}, "cluster": {"workers": 1048576},
             "optimizer": {"name": "onebit_adam"}})",
         "", "cluster.workers = 1048576 workers of d = 4194304 parameters need at least 4.76 EB "
             "(4-byte floats: the streamed gradient mean's blocks and partial sums, and the "
             "parameters; the optimizer's state 4.76 EB)"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.expect);
      const auto file = d.file("exp.json", c.content);
      const fs::path out = d.path / "never";
      Result r = run_bitlab(d, "run " + file + " --out " + out.string() + " " + c.args);
      CHECK(r.status == 2);
      CHECK(r.err.find(c.expect) != std::string::npos);
      CHECK(!fs::exists(out));
      CHECK(r.out.empty());
    }
    {
      // The same many workers under Adam, which reads only the gradients'
      // mean: streamed, a few rows per thread instead of 2^20 (275 GB at
      // d = 2^16), so the memory check lets it through.
      const auto file = d.file("streamed.json", R"({"problem": {"name": "quadratic", "dim": 65536},
          "cluster": {"workers": 1048576}, "optimizer": {"name": "adam"}})");
      const Result v = run_bitlab(d, "validate " + file);
      CHECK(v.status == 0);
      CHECK(v.err.find("streamed into their mean") != std::string::npos);
    }
    Result r = run_bitlab(d, "run " + (d.path / "missing.json").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("missing.json: no such file") != std::string::npos);
    // A file that never ends (or a sweep's base naming one) is read up to a
    // bound, not until memory runs out.
    if (fs::exists("/dev/zero")) {
      r = run_bitlab(d, "validate /dev/zero");
      CHECK(r.status == 2);
      CHECK(r.err.find("/dev/zero: longer than 64 MiB") != std::string::npos);
      const auto zero_base = d.file("zero.json", R"({"base": "/dev/zero"})");
      r = run_bitlab(d, "sweep " + zero_base + " --out " + (d.path / "never").string());
      CHECK(r.status == 2);
      CHECK(r.err.find("/dev/zero: longer than 64 MiB") != std::string::npos);
    }
    // A grid of 64 paths × 2 values is 2^64 runs: refused, not wrapped to 0.
    Json grid = Json::object();
    for (int k = 0; k < 64; ++k) grid["description_" + std::to_string(k)] = {1, 2};
    const auto huge =
        d.file("huge.json", Json{{"base", Json::parse(kGood)}, {"grid", grid}}.dump());
    r = run_bitlab(d, "sweep " + huge + " --out " + (d.path / "never").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("makes more than 100000 runs") != std::string::npos);
    CHECK(!fs::exists(d.path / "never"));
    // Sizes that would overflow the cost model's byte counts are refused.
    r = run_bitlab(d,
                   "cost --params 4611686018427387904 --workers 64 --steps 10 --network "
                   "ethernet_10g_a100x8 --optimizer adam");
    CHECK(r.status == 2);
    CHECK(r.err.find("params = 4611686018427387904: must be") != std::string::npos);
    // validate gives the same verdicts without running
    const auto bad = d.file("bad.json", cases[3].content);
    r = run_bitlab(d, "validate " + bad);
    CHECK(r.status == 2);
    CHECK(r.err.find("optimizer.beta1 = 1.0") != std::string::npos);
    r = run_bitlab(d, "validate " + d.file("good.json", kGood) + " --print");
    CHECK(r.status == 0);
    // Adam streams its gradients into their mean: the estimate counts each
    // thread's block and the tree's nodes (cluster suite), not rows.
    CHECK(r.err.find("for the workers' gradients (streamed into their mean") != std::string::npos);
    CHECK(Json::parse(r.out)["optimizer"]["eps"] == 1e-8);
    // 1-bit Adam folds each worker's gradient into its momentum as it is
    // made (take_gradient): no gradient rows, only the streamed mean's blocks;
    // its state (error rows over the padded buffer) is the optimizer's.
    r = run_bitlab(d, "validate " + d.file("good.json", kGood) + " --set optimizer.name=onebit_adam");
    CHECK(r.status == 0);
    CHECK(r.err.find("for the workers' gradients (streamed into their mean") != std::string::npos);
    CHECK(r.err.find("for the optimizer's state") != std::string::npos);
    // validate says the warnings run says before its first step: here 0/1
    // Adam's variance never freezes in a run of 30 steps.
    r = run_bitlab(d, "validate " + d.file("good.json", kGood) +
                          " --set optimizer.name=zero_one_adam --set optimizer.var_freeze_step=40");
    CHECK(r.status == 0);
    CHECK_MESSAGE(r.err.find("bitlab: warning: optimizer.var_freeze_step = 40 is not below steps = "
                             "30: the variance never freezes") != std::string::npos,
                  r.err);
  }

  TEST_CASE("a diverging run stops, says so in summary.json, exits 3") {
    TempDir d;
    const auto file = d.file("div.json", R"({"steps": 500,
      "problem": {"name": "quadratic", "dim": 10, "condition_number": 100},
      "optimizer": {"name": "sgd", "lr": 10.0}})");
    const auto out = (d.path / "run").string();
    Result r = run_bitlab(d, "run " + file + " --out " + out);
    CHECK(r.status == 3);
    CHECK(r.err.find("diverged at step") != std::string::npos);
    const Json s = Json::parse(slurp(fs::path(out) / "summary.json"));
    CHECK(s["status"] == "diverged");
    CHECK(s["divergence"]["step"].get<int>() < 500);
    CHECK(s["divergence"]["hint"].get<std::string>().find("optimizer.lr") != std::string::npos);
  }

  TEST_CASE("a run that cannot write its results ends failed, exit 4, never completed") {
    // A full disk, portably: comm_log.csv is a link to /dev/full, where every
    // write fails with ENOSPC (a 200 kB tmpfs gives the same outcome, checked
    // by hand: see docs/results.md). The run must stop at the first step it
    // cannot record, say why, and leave no torn row.
    if (!fs::exists("/dev/full")) {
      MESSAGE("skipped: this system has no /dev/full");
      return;
    }
    TempDir d;
    const auto file = d.file("exp.json", kGood);
    const fs::path out = d.path / "run";
    fs::create_directories(out);
    fs::create_symlink("/dev/full", out / "comm_log.csv");
    const Result r = run_bitlab(d, "run " + file + " --out " + out.string() + " --quiet");
    CHECK(r.status == 4);
    CHECK(r.err.find("cannot write " + (out / "comm_log.csv").string() +
                     ": No space left on device") != std::string::npos);
    const Json s = Json::parse(slurp(out / "summary.json"));
    CHECK(s["status"] == "failed");
    CHECK(s["failure"].get<std::string>().find("No space left on device") != std::string::npos);
    // metrics.csv is cut back to the last step every file took: here, none.
    const std::string metrics = slurp(out / "metrics.csv");
    CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 1);
    CHECK(metrics.back() == '\n');
  }

  TEST_CASE("Ctrl-C, SIGTERM and SIGHUP leave summary.json interrupted and complete metrics") {
    // SIGTERM is what Slurm sends at a time limit or on preemption, SIGHUP what
    // a closing terminal sends: each must end the run as Ctrl-C does.
    TempDir d;
    const auto file = d.file("long.json", R"({"steps": 100000000,
      "problem": {"name": "quadratic", "dim": 1000}, "cluster": {"workers": 2},
      "optimizer": {"name": "sgd", "lr": 0.01}})");
    const std::pair<int, const char*> signals[] = {
        {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"}};
    for (const auto& entry : signals) {
      // Not a structured binding: clang 14 (the sanitizer build) cannot
      // capture one in INFO's lambda.
      const int sig = entry.first;
      const char* name = entry.second;
      INFO(std::string(name));
      const auto out = (d.path / name).string();
      const pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(BITLAB_BINARY, BITLAB_BINARY, "run", file.c_str(), "--out", out.c_str(), "--quiet",
              static_cast<char*>(nullptr));
        _exit(127);
      }
      // Wait until the run is under way (metrics.csv exists and has rows).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < deadline &&
             (!fs::exists(fs::path(out) / "metrics.csv") ||
              fs::file_size(fs::path(out) / "metrics.csv") < 5000)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      kill(pid, sig);
      int raw = 0;
      waitpid(pid, &raw, 0);
      REQUIRE(WIFEXITED(raw));
      CHECK(WEXITSTATUS(raw) == 128 + sig);
      const Json s = Json::parse(slurp(fs::path(out) / "summary.json"));
      CHECK(s["status"] == "interrupted");
      CHECK(s["signal"] == name);
      CHECK(s["steps_completed"].get<int64_t>() > 0);
      // every completed step is in metrics.csv, and its last line is whole
      const std::string text = slurp(fs::path(out) / "metrics.csv");
      CHECK(text.back() == '\n');
      std::istringstream metrics(text);
      std::string line, last;
      int64_t rows = -1;
      while (std::getline(metrics, line)) {
        ++rows;
        last = line;
      }
      CHECK(rows == s["steps_completed"].get<int64_t>());
      CHECK(last.rfind(std::to_string(rows) + ",", 0) == 0);
    }
  }

  TEST_CASE("--set may come before the file; the last --set of a path wins") {
    TempDir d;
    const auto file = d.file("exp.json", kGood);
    const auto out = (d.path / "run").string();
    Result r = run_bitlab(d, "run --set optimizer.lr=0.5 --set optimizer.lr=0.02 " + file +
                                 " --out " + out + " --quiet");
    REQUIRE(r.status == 0);
    const Json config = Json::parse(slurp(fs::path(out) / "config.json"));
    CHECK(config["optimizer"]["lr"] == 0.02);
    r = run_bitlab(d, "validate --set steps=0 --set steps=-1 " + file);
    CHECK(r.status == 2);
    CHECK(r.err.find("--set steps=-1: steps = -1") != std::string::npos);
  }

  TEST_CASE("validate, run and cost on a sweep file: \"this is a sweep file\", exit 2") {
    TempDir d;
    d.file("exp.json", kGood);
    const auto sweep = d.file("sweep.json", R"({"name": "s", "base": "exp.json",
      "grid": {"optimizer.lr": [0.01, 0.05]}})");
    const auto out = d.path / "out";
    for (const std::string& cmd : {"validate " + sweep, "run " + sweep + " --out " + out.string(),
                                  "validate --print " + sweep}) {
      CAPTURE(cmd);
      const Result r = run_bitlab(d, cmd);
      CHECK(r.status == 2);
      CHECK(r.err.find(sweep + ": this is a sweep file (it has \"grid\"), not an experiment: use "
                       "bitlab sweep " + sweep) != std::string::npos);
      CHECK(r.err.find("unknown key") == std::string::npos);
      CHECK_FALSE(fs::exists(out));
    }
    // Only a zip or seeds: the same.
    const auto seeds = d.file("seeds.json", R"({"base": "exp.json", "seeds": [1, 2]})");
    const Result r = run_bitlab(d, "validate " + seeds);
    CHECK(r.status == 2);
    CHECK(r.err.find("this is a sweep file (it has \"seeds\")") != std::string::npos);
  }

  TEST_CASE("messages that point the right way (names, sweeps, --set, cost, batch)") {
    TempDir d;
    const auto good = d.file("exp.json", kGood);
    const auto out = d.path / "out";
    // A name that cannot be a folder name: refused by name, with the rule, nothing created.
    const auto long_name = d.file("long.json", R"({"base": "exp.json", "name": ")" +
                                                   std::string(300, 'n') + R"("})");
    Result r = run_bitlab(d, "run " + long_name + " --out " + out.string());
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find("is 300 bytes long: at most 200 (it names the results folder)") !=
                      std::string::npos,
                  r.err);
    CHECK(r.err.find("bitlab: error: name = ") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    CHECK_FALSE(fs::exists(d.path / "results"));
    const auto long_sweep =
        d.file("ls.json", R"({"base": "exp.json", "name": ")" + std::string(201, 's') + R"("})");
    r = run_bitlab(d, "sweep " + long_sweep + " --dry-run");
    CHECK(r.status == 2);
    CHECK(r.err.find("is 201 bytes long: at most 200") != std::string::npos);
    // An experiment given to sweep: said as such, not as "seed: did you mean seeds?".
    r = run_bitlab(d, "sweep " + good + " --out " + out.string());
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find(good + ": this is an experiment (it has \"problem\" and no "
                             "\"grid\", \"zip\" or \"seeds\"), not a sweep: run it with "
                             "bitlab run") != std::string::npos,
                  r.err);
    CHECK(r.err.find("did you mean") == std::string::npos);
    CHECK_FALSE(fs::exists(out));
    // --set deepspeed_config=FILE, as files use it (relative to the working folder).
    d.file("ds.json", R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
      "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})");
    r = run_bitlab(d, "validate " + good + " --print --set deepspeed_config=ds.json",
                   "cd " + d.path.string() + " &&");
    CHECK_MESSAGE(r.status == 0, r.err);
    CHECK(r.out.find("\"workers\": 4") != std::string::npos);
    CHECK(r.err.find("--set deepspeed_config=ds.json: optimizer and cluster read from DeepSpeed "
                     "config") != std::string::npos);
    r = run_bitlab(d, "validate " + good + " --set deepspeed_config=nope.json",
                   "cd " + d.path.string() + " &&");
    CHECK(r.status == 2);
    CHECK(r.err.find("nope.json: no such file") != std::string::npos);
    // cost: every missing field at once, each with its flag.
    r = run_bitlab(d, "cost --params 1e6 --optimizer adam");
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find("3 required fields missing: workers (--workers N), steps (--steps "
                             "N), network (--network PRESET or --network-file FILE)") !=
                      std::string::npos,
                  r.err);
    // A batch larger than a worker's shard (256 samples over 4 workers: 64 each) warns.
    r = run_bitlab(d, "run " + good + " --out " + out.string() +
                          " --set cluster.batch_size=100000 --set steps=2");
    CHECK(r.status == 0);
    const std::string batch_warning =
        "cluster.batch_size = 100000 is larger than a worker's shard (about 64 samples: 256 "
        "training samples over 4 workers)";
    CHECK_MESSAGE(r.err.find("bitlab: warning: " + batch_warning) != std::string::npos, r.err);
    CHECK(slurp(out / "summary.json").find(batch_warning) != std::string::npos);
    fs::remove_all(out);
    r = run_bitlab(d, "run " + good + " --out " + out.string() +
                          " --set cluster.batch_size=64 --set steps=2");
    CHECK(r.status == 0);
    CHECK(r.err.find("larger than a worker's shard") == std::string::npos);
  }

  TEST_CASE("a base chain too deep is one short line; a big padding names pad_multiple") {
    TempDir d;
    const std::string stem = "chain-" + std::string(40, 'x') + "-";
    for (int k = 0; k < 70; ++k) {
      d.file(stem + std::to_string(k) + ".json",
             R"({"base": ")" + stem + std::to_string(k + 1) + R"(.json"})");
    }
    Result r = run_bitlab(d, "validate " + (d.path / (stem + "0.json")).string());
    CHECK(r.status == 2);
    CHECK(r.err.find("a chain of \"base\" files deeper than 64: ") != std::string::npos);
    CHECK(r.err.find("-> ... (61 more) -> ") != std::string::npos);
    // Said once: not wrapped by each of the 64 files ("base = ..." at most once).
    CHECK(r.err.find("base = ") == std::string::npos);
    CHECK_MESSAGE(r.err.size() < 1000, r.err);  // was one line of 6 kB
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    // optimizer.pad_multiple = 2^40 pads d = 6 (5 weights and the bias) to 2^40: named,
    // with the fix (8n).
    const auto pad = d.file("pad.json", R"({"name": "pad", "steps": 5,
      "problem": {"name": "logistic", "dim": 5, "samples": 64},
      "cluster": {"workers": 4, "batch_size": 8},
      "optimizer": {"name": "onebit_adam", "pad_multiple": 1099511627776}})");
    r = run_bitlab(d, "validate " + pad);
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find("bitlab: error: optimizer.pad_multiple = 1099511627776 pads d = 6 "
                             "parameters to 1099511627776 (1.83e+11x)") != std::string::npos,
                  r.err);
    CHECK(r.err.find("set optimizer.pad_multiple = 8*n = 32") != std::string::npos);
    CHECK(r.err.rfind("bitlab: error: cluster.workers", 0) == std::string::npos);
  }

  TEST_CASE("after the run: a loss that rose, communication slower than the twin's") {
    TempDir d;
    // 1-bit Adam with lr 0.1, eps 1e-8 and a 3-step warm-up on logistic regression: its
    // 20-step mean loss rises from 0.585 to 0.807 without reaching the divergence line.
    const auto rising = d.file("rising.json", R"({"name": "rising", "steps": 200,
      "problem": {"name": "logistic", "dim": 20, "samples": 512},
      "cluster": {"workers": 4, "batch_size": 16},
      "optimizer": {"name": "onebit_adam", "lr": 0.1, "eps": 1e-8, "freeze_step": 3}})");
    Result r = run_bitlab(d, "run " + rising + " --out " + (d.path / "rising").string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string rose = "train_loss rose without diverging: its 20-step mean rose from ";
    CHECK_MESSAGE(r.err.find("bitlab: warning: " + rose) != std::string::npos, r.err);
    CHECK(r.err.find("cause: ") != std::string::npos);
    CHECK(slurp(d.path / "rising" / "summary.json").find(rose) != std::string::npos);
    // The same run with a sound learning rate: no such warning.
    r = run_bitlab(d, "run " + rising + " --out " + (d.path / "sound").string() +
                          " --set optimizer.lr=0.01 --set optimizer.freeze_step=20");
    REQUIRE(r.status == 0);
    CHECK_MESSAGE(r.err.find("rose without diverging") == std::string::npos, r.err);

    // LoCo's per-tensor two-stage exchange on 40 tensors over 2 nodes: half Adam's bytes,
    // 20x its messages, and latency decides (0.185 s against 0.0093 s).
    const auto loco = d.file("loco.json", R"({"name": "loco", "steps": 10,
      "problem": {"name": "quadratic", "dim": 4000, "tensors": 40},
      "cluster": {"workers": 16}, "optimizer": {"name": "loco", "lr": 0.01},
      "network": {"preset": "ethernet_10g_a100x8"}})");
    r = run_bitlab(d, "run " + loco + " --out " + (d.path / "loco").string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK_MESSAGE(r.err.find("exceeds the uncompressed twin's") != std::string::npos, r.err);
    CHECK(r.err.find("latency decides, 6150 messages per worker against 300") !=
          std::string::npos);
    CHECK(r.err.find("(communication only: no compute model)") != std::string::npos);
    const Json summary = Json::parse(slurp(d.path / "loco" / "summary.json"));
    CHECK(summary["time"]["communication_only"] == true);
    CHECK(summary["warnings"].dump().find("latency decides") != std::string::npos);
    // Its twin (Adam, priced the same way) raises no such warning.
    r = run_bitlab(d, "run " + loco + " --out " + (d.path / "adam").string() +
                          " --set optimizer.name=adam");
    REQUIRE(r.status == 0);
    CHECK(r.err.find("exceeds the uncompressed twin's") == std::string::npos);
  }

  TEST_CASE("setup.sh path: bitlab on PATH by a link, or the one line to add") {
    TempDir d;
    d.file("build/bitlab", "#!/bin/sh\necho fake-bitlab\n");
    fs::permissions(d.path / "build" / "bitlab", fs::perms::owner_all);
    const std::string setup = "BITLAB_BUILD_DIR=" + (d.path / "build").string() + " bash " +
                              (fs::path(BITLAB_SOURCE_DIR) / "setup.sh").string() + " path";
    Result r = bitlab::testing::run_shell(d, "BITLAB_BIN_DIR=" + (d.path / "bin").string() + " " +
                                                 setup);
    CHECK_MESSAGE(r.status == 0, r.err);
    CHECK(fs::read_symlink(d.path / "bin" / "bitlab") == d.path / "build" / "bitlab");
    CHECK(r.err.find("setup: bitlab is on PATH: " + (d.path / "bin" / "bitlab").string()) !=
          std::string::npos);
    r = bitlab::testing::run_shell(d, "PATH=" + (d.path / "bin").string() + ":$PATH bitlab");
    CHECK(r.out == "fake-bitlab\n");
    // A folder it cannot write (a file stands in its way): the export line instead.
    d.file("blocked", "");
    r = bitlab::testing::run_shell(
        d, "BITLAB_BIN_DIR=" + (d.path / "blocked" / "bin").string() + " " + setup);
    CHECK(r.status == 0);
    CHECK_MESSAGE(r.err.find("use: export PATH=\"" + (d.path / "build").string() + ":$PATH\"") !=
                      std::string::npos,
                  r.err);
  }

  TEST_CASE("setup.sh stops on a build folder configured for another source tree") {
    TempDir d;
    const fs::path build = d.path / "build";
    const std::string setup = "BITLAB_BUILD_DIR=" + build.string() + " bash " +
                              (fs::path(BITLAB_SOURCE_DIR) / "setup.sh").string() + " nosuch-mode";
    // As a copied checkout's build/ has it: configured for the original tree.
    d.file("build/CMakeCache.txt", "CMAKE_HOME_DIRECTORY:INTERNAL=/some/other/checkout\n");
    Result r = bitlab::testing::run_shell(d, setup);
    CHECK(r.status == 2);
    CHECK(r.err.find("was configured for the source tree /some/other/checkout, not this one (" +
                     fs::canonical(BITLAB_SOURCE_DIR).string() + ")") != std::string::npos);
    CHECK(r.err.find("rm -rf " + build.string()) != std::string::npos);
    CHECK(r.err.find("usage:") == std::string::npos);  // stopped before anything else
    CHECK(fs::exists(build / "CMakeCache.txt"));       // and removed nothing
    // Configured for this tree: the check passes (and the unknown mode is refused).
    d.file("build/CMakeCache.txt",
           "CMAKE_HOME_DIRECTORY:INTERNAL=" + std::string(BITLAB_SOURCE_DIR) + "\n");
    r = bitlab::testing::run_shell(d, setup);
    CHECK(r.status == 2);
    CHECK(r.err.find("was configured for") == std::string::npos);
    CHECK(r.err.find("usage: ./setup.sh") != std::string::npos);
  }

  TEST_CASE("list shows every optimizer, problem and option") {
    TempDir d;
    Result r = run_bitlab(d, "list");
    REQUIRE(r.status == 0);
    for (const char* s : {"sgd", "momentum_sgd", "adam", "lamb", "quadratic", "least_squares",
                          "logistic", "mlp", "condition_number", "bias_correction",
                          "dirichlet_alpha", "batch_size", "eval_every", "max_coeff"}) {
      CHECK(r.out.find(s) != std::string::npos);
    }
    r = run_bitlab(d, "list --json");
    REQUIRE(r.status == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["optimizers"].contains("adam"));
    CHECK(j["problems"].contains("mlp"));
  }
}

TEST_SUITE("cli") {
  TEST_CASE("rate: fits exponents with intervals; bad --vary is exit 2 with no folder") {
    TempDir d;
    const std::string exp = d.file("q.json", R"({"name": "q", "steps": 64,
      "problem": {"name": "quadratic", "dim": 16, "condition_number": 4, "noise": 1.0},
      "cluster": {"workers": 2}, "optimizer": {"name": "adam", "lr": 1.0}})");
    struct Bad {
      std::string args, expect;
    };
    for (const Bad& b : std::vector<Bad>{
             {"--vary steps=32,64", "needs at least 3 distinct values"},
             {"--vary optimizer.lrr=1,2,3", "the experiment has no numeric setting optimizer.lrr"},
             {"--vary steps=32,abc,64", "\"abc\" is not a number"}}) {
      CAPTURE(b.args);
      const fs::path out = d.path / "bad";
      const Result r = run_bitlab(d, "rate " + exp + " " + b.args + " --out " + out.string());
      CHECK(r.status == 2);
      CHECK(r.err.find(b.expect) != std::string::npos);
      CHECK_FALSE(fs::exists(out));
    }
    // --set as bitlab run's: a bad one is exit 2 naming it, with no folder.
    const fs::path bad = d.path / "badset";
    const Result bad_set = run_bitlab(d, "rate " + exp + " --vary steps=32,64,128 --set " +
                                             "optimizer.lr=-1 --out " + bad.string());
    CHECK(bad_set.status == 2);
    CHECK(bad_set.err.find("--set optimizer.lr=-1: optimizer.lr = -1") != std::string::npos);
    CHECK_FALSE(fs::exists(bad));
    const fs::path out = d.path / "fit";
    const Result r =
        run_bitlab(d, "rate " + exp + " --vary steps=32,64,128 --seeds 3 --lr-scaling " +
                          "inv_sqrt_T --set optimizer.lr=0.5 --quiet --out " + out.string());
    REQUIRE(r.status == 0);
    CHECK(r.out.find("steps") != std::string::npos);
    CHECK(r.out.find("95% CI") != std::string::npos);
    CHECK(r.out.find("fit: R^2 = ") != std::string::npos);
    CHECK(r.out.find("local exponents in steps") != std::string::npos);
    CHECK(fs::exists(out / "rate.json"));
    CHECK(fs::exists(out / "rate.csv"));
    const Json fit = Json::parse(slurp(out / "rate.json"));
    CHECK(fit["goodness_of_fit"]["local_exponents"]["steps"].size() == 2);
    CHECK(fit["goodness_of_fit"].contains("not_power_law"));
    // The --set reached the runs: lr = 0.5 / sqrt(T) (--lr-scaling inv_sqrt_T of the set lr).
    const Json first = Json::parse(slurp(out / "run-001_steps=32_optimizer.lr=0.0883883_seed=1" /
                                         "config.json"));
    CHECK(first["optimizer"]["lr"] == 0.0883883);
  }
}
