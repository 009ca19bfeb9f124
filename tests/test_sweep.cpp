// Sweeps (sim/lab/sweep.hpp): resolution of grid × zip × seeds, validation before
// anything is created, parallel runs equal to serial ones and to `bitlab run`,
// divergence and failure that do not stop the sweep, --resume, Ctrl-C.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include "sim/core/files.hpp"
#include "sim/engine/config.hpp"
#include "sim/lab/sweep.hpp"
#include "sim/lab/sweep_csv.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using bitlab::Json;

using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;

namespace {

// The csv's lines, with the columns named in `drop` removed.
std::vector<std::string> csv_without(const std::string& text,
                                     const std::vector<std::string>& drop) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line);
    while (std::getline(ls, cell, ',')) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  std::vector<std::string> out;
  if (rows.empty()) return out;
  std::vector<bool> keep;
  for (const auto& h : rows[0])
    keep.push_back(std::find(drop.begin(), drop.end(), h) == drop.end());
  for (const auto& r : rows) {
    std::string s;
    for (size_t k = 0; k < r.size(); ++k) {
      if (k < keep.size() && keep[k]) s += r[k] + ",";
    }
    out.push_back(s);
  }
  return out;
}

const char* kBase = R"({
  "name": "base", "steps": 40, "eval_every": 20, "seed": 3,
  "problem": {"name": "logistic", "dim": 5, "samples": 256},
  "cluster": {"workers": 4, "batch_size": 8},
  "optimizer": {"name": "adam", "lr": 0.05}
})";

// 2 (grid) × 2 (zip) × 2 (seeds) = 8 small runs.
const char* kSweep = R"({
  "name": "t", "base": "base.json",
  "grid": {"optimizer.lr": [0.01, 0.05]},
  "zip": {"optimizer.name": ["adam", "onebit_adam"], "optimizer.bias_correction": [true, false]},
  "seeds": [1, 2]
})";

bool no_tmp_left(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") return false;
  }
  return true;
}

}  // namespace

namespace {

// Every `.bitlab.lock*` file under `dir`.
std::vector<std::string> lock_files(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().rfind(".bitlab.lock", 0) == 0) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

// A csv line's cells, quoted cells ("a, b", "" for ") unquoted.
std::vector<std::string> csv_cells(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t k = 0; k < line.size(); ++k) {
    const char c = line[k];
    if (quoted && c == '"' && k + 1 < line.size() && line[k + 1] == '"') {
      cells.back() += '"';
      ++k;
    } else if (c == '"') {
      quoted = !quoted;
    } else if (c == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

// adam beside onebit_adam with its default freeze_step 100 in a 20-step run:
// the onebit_adam runs warn that they never compress.
const char* kWarnedSweep = R"({"name": "w",
  "base": {"steps": 20, "problem": {"name": "quadratic", "dim": 4}, "cluster": {"workers": 2},
           "optimizer": {"name": "adam", "lr": 0.01, "bias_correction": false}},
  "zip": {"optimizer.name": ["adam", "onebit_adam"]}, "seeds": [1, 2]})";

}  // namespace

TEST_SUITE("sweep") {
  TEST_CASE("grid x zip x seeds: count, order, labels and folder names") {
    TempDir d;
    d.file("base.json", kBase);
    const auto spec = bitlab::load_sweep(d.file("s.json", kSweep));
    CHECK(spec.name == "t");
    REQUIRE(spec.runs.size() == 8);
    CHECK(spec.swept == std::vector<std::string>{"optimizer.lr", "optimizer.name",
                                                 "optimizer.bias_correction", "seed"});
    // Grid slowest, then zip tuples, seeds fastest.
    CHECK(spec.runs[0].label ==
          "optimizer.lr=0.01, optimizer.name=adam, optimizer.bias_correction=true, seed=1");
    CHECK(spec.runs[1].label ==
          "optimizer.lr=0.01, optimizer.name=adam, optimizer.bias_correction=true, seed=2");
    CHECK(spec.runs[2].label ==
          "optimizer.lr=0.01, optimizer.name=onebit_adam, optimizer.bias_correction=false, seed=1");
    CHECK(spec.runs[7].dir_name ==
          "run-008_optimizer.lr=0.05_optimizer.name=onebit_adam_optimizer.bias_correction=false_"
          "seed=2");
    CHECK(spec.runs[7].config["optimizer"]["name"] == "onebit_adam");
    CHECK(spec.runs[7].config["optimizer"]["lr"] == 0.05);
    CHECK(spec.runs[7].config["seed"] == 2);
    CHECK(spec.runs[7].config["steps"] == 40);  // the base's
    // An inline base and no lists: one run of the base.
    const auto one = bitlab::resolve_sweep(Json::parse(std::string(R"({"base": )") + kBase + "}"),
                                           d.path.string(), "solo");
    CHECK(one.name == "solo");
    REQUIRE(one.runs.size() == 1);
    CHECK(one.runs[0].dir_name == "run-001");
  }

  TEST_CASE("values as written: \"15%\" in labels and folder names, the step beside it") {
    TempDir d;
    const std::string base = R"("base": {"steps": 600, "problem": {"name": "quadratic", "dim": 4},
               "optimizer": {"name": "onebit_adam"}})";
    auto spec = bitlab::resolve_sweep(
        Json::parse("{" + base + R"(, "grid": {"optimizer.freeze_step": ["15%", 120]}})"),
        d.path.string(), "pct", false);
    REQUIRE(spec.runs.size() == 2);
    CHECK(spec.runs[0].dir_name == "run-001_optimizer.freeze_step=15%");
    CHECK(spec.runs[0].label == "optimizer.freeze_step=15% (step 90)");
    CHECK(spec.runs[0].value_texts[0] == "15%");  // sweep.csv's cell: as written
    CHECK(spec.runs[1].label == "optimizer.freeze_step=120");
    // Inside a swept object too: its key's value as written, the step beside it.
    spec = bitlab::resolve_sweep(Json::parse("{" + base + R"(, "zip": {"optimizer": [
        {"name": "zero_one_adam", "var_freeze_step": "10%"}, {"name": "adam"}]}})"),
                                 d.path.string(), "pct", false);
    REQUIRE(spec.runs.size() == 2);
    CHECK_MESSAGE(spec.runs[0].label == "optimizer=zero_one_adam var_freeze_step=10% (step 60)",
                  spec.runs[0].label);
    CHECK(spec.runs[0].dir_name.find("var_freeze_step=10%") != std::string::npos);
    CHECK(spec.runs[1].label == "optimizer=adam");
  }

  TEST_CASE("warnings grouped by kind: a number that differs between runs as its range") {
    using bitlab::group_warnings;
    const std::string a = "at the switch (step 90) ", b = "% of the coordinates have sqrt(v) "
                                                          "below eps = 1e-08";
    const auto groups = group_warnings({{1, {a + "29.1" + b, "fp32 wire"}},
                                        {2, {a + "36.4" + b}},
                                        {3, {a + "30" + b, "fp16 wire"}}});
    REQUIRE(groups.size() == 3);
    CHECK(groups[0].text == a + "29.1\u2013" + "36.4" + b);
    CHECK(groups[0].runs == std::vector<int>{1, 2, 3});
    // Numbers inside words ("fp32", "fp16") are words: two kinds, one run each.
    CHECK(groups[1].text == "fp32 wire");
    CHECK(groups[2].text == "fp16 wire");
    CHECK(groups[2].runs == std::vector<int>{3});
    // The same number everywhere stays as it is; a run's warning counted once per run.
    const auto same = group_warnings({{4, {"eps = 1e-08 x 2", "eps = 1e-08 x 3"}}});
    REQUIRE(same.size() == 1);
    CHECK(same[0].text == "eps = 1e-08 x 2\u20133");
    CHECK(same[0].runs == std::vector<int>{4});
  }

  TEST_CASE("a bad sweep exits 2, names the path or the run, and creates no folder") {
    TempDir d;
    d.file("base.json", kBase);
    struct Case {
      const char* sweep;
      const char* message;
    };
    const Case cases[] = {
        {R"({"base": "base.json", "grdi": {}})", "grdi = {}: unknown key; did you mean \"grid\"?"},
        {R"({"base": "base.json", "grid": {"optimizer.lr": 0.1}})",
         "grid.optimizer.lr = 0.1: must be a non-empty list of values"},
        {R"({"base": "base.json", "zip": {"optimizer.lr": [0.1, 0.2], "seed": [1]}})",
         "zip.seed = [1]: every zip list must have the same length"},
        {R"({"base": "base.json", "seeds": [1, -2]})", "seeds[1] = -2: must be an integer >= 0"},
        {R"({"base": "missing.json"})", "base = \"missing.json\""},
        {R"({"grid": {"optimizer.lr": [1]}})", "base = null: is required"},
        {R"({"base": "base.json", "grid": {"optimizer.lr": [0.1, -1]}, "seeds": [1, 2]})",
         "run 3 (optimizer.lr=-1, seed=1): optimizer.lr = -1: must be > 0"},
        {R"({"base": "base.json", "grid": {"optimizer.lrr": [0.1]}})",
         "run 1 (optimizer.lrr=0.1): optimizer.lrr = 0.1: unknown key"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.sweep);
      const auto file = d.file("bad.json", c.sweep);
      const auto out = d.path / "out";
      Result r = run_bitlab(d, "sweep " + file + " --out " + out.string());
      CHECK(r.status == 2);
      CHECK_MESSAGE(r.err.find(c.message) != std::string::npos, r.err);
      CHECK(!fs::exists(out));
    }
    // The default folder (results/<name>) is not created either.
    const auto file = d.file("bad.json", R"({"name": "x", "base": "base.json",
      "grid": {"optimizer.lr": [-1]}})");
    Result r = run_bitlab(d, "sweep " + file + " --quiet");
    CHECK(r.status == 2);
    CHECK(!fs::exists("results/x"));
  }

  TEST_CASE("--jobs 2 gives the runs of --jobs 1, and each equals bitlab run") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", kSweep);
    const auto a = d.path / "a", b = d.path / "b";
    Result ra = run_bitlab(d, "sweep " + file + " --out " + a.string() + " --jobs 1");
    REQUIRE(ra.status == 0);
    CHECK(ra.out == a.string() + "\n");
    CHECK(ra.err.find("8 completed") != std::string::npos);
    Result rb = run_bitlab(d, "sweep " + file + " --out " + b.string() + " --jobs 2 --quiet");
    REQUIRE(rb.status == 0);
    CHECK(rb.err.empty());
    const auto csv_a = csv_without(slurp(a / "sweep.csv"), {"wall_s"});
    CHECK(csv_a.size() == 9);
    CHECK(csv_a[0] ==
          "run,optimizer.lr,optimizer.name,optimizer.bias_correction,optimizer,workers,problem,"
          "seed,status,steps_completed,"
          "train_loss,eval_loss,eval_accuracy,train_loss_full,suboptimality,bytes_sent_per_worker,"
          "messages_per_worker,dir,warnings,");
    // The optimizer, workers and problem columns hold every run's values, swept or not.
    CHECK(csv_a[1].rfind("1,0.01,adam,true,adam,4,logistic,1,completed,", 0) == 0);
    CHECK(std::count_if(csv_a.begin(), csv_a.end(), [](const std::string& row) {
            return row.find(",onebit_adam,false,onebit_adam,4,logistic,") != std::string::npos;
          }) == 4);
    CHECK(csv_a == csv_without(slurp(b / "sweep.csv"), {"wall_s"}));
    CHECK(no_tmp_left(a));
    CHECK(no_tmp_left(b));
    const Json sj = Json::parse(slurp(a / "sweep.json"));
    CHECK(sj["runs"].size() == 8);
    CHECK(sj["runs"][4]["assignments"]["optimizer.name"] == "adam");

    // Run 5 (lr 0.05, adam, seed 1) by hand.
    const auto base = (d.path / "base.json").string();
    const auto solo = d.path / "solo";
    Result rs = run_bitlab(d, "run " + base +
                                  " --set optimizer.lr=0.05 --set optimizer.name=adam "
                                  "--set optimizer.bias_correction=true --set seed=1 --quiet "
                                  "--threads 1 --out " +
                                  solo.string());
    REQUIRE(rs.status == 0);
    const auto run5 =
        a / "run-005_optimizer.lr=0.05_optimizer.name=adam_optimizer.bias_correction=true_seed=1";
    REQUIRE(fs::exists(run5 / "metrics.csv"));
    const auto m_sweep = csv_without(slurp(run5 / "metrics.csv"), {"wall_s"});
    CHECK(m_sweep.size() == 41);
    CHECK(m_sweep == csv_without(slurp(solo / "metrics.csv"), {"wall_s"}));
    CHECK(slurp(run5 / "comm_log.csv") == slurp(solo / "comm_log.csv"));

    // Without --resume, a folder holding a sweep is refused and left as it was.
    const auto before = slurp(a / "sweep.csv");
    Result again = run_bitlab(d, "sweep " + file + " --out " + a.string());
    CHECK(again.status == 2);
    CHECK(again.err.find("already holds a sweep") != std::string::npos);
    CHECK(slurp(a / "sweep.csv") == before);
  }

  TEST_CASE("a diverging run does not stop the sweep and is listed; exit 3") {
    TempDir d;
    const auto file = d.file("div.json", R"({"name": "div",
      "base": {"steps": 200, "problem": {"name": "quadratic", "dim": 10, "condition_number": 100},
               "cluster": {"workers": 2}, "optimizer": {"name": "sgd", "lr": 0.001}},
      "grid": {"optimizer.lr": [0.001, 10.0, 0.002]}})");
    const auto out = d.path / "out";
    Result r = run_bitlab(d, "sweep " + file + " --out " + out.string() + " --jobs 2");
    CHECK(r.status == 3);
    CHECK(r.err.find("2 completed, 1 diverged") != std::string::npos);
    CHECK(r.err.find("diverged: run 2 (optimizer.lr=10.0)") != std::string::npos);
    const auto csv = csv_without(slurp(out / "sweep.csv"), {});
    REQUIRE(csv.size() == 4);
    CHECK(csv[1].find(",completed,200,") != std::string::npos);
    CHECK(csv[2].find(",diverged,") != std::string::npos);
    CHECK(csv[3].find(",completed,200,") != std::string::npos);
  }

  TEST_CASE("a run that fails is recorded as failed with its stderr (the binary is a parameter)") {
    TempDir d;
    const auto spec = bitlab::resolve_sweep(
        Json::parse(R"({"name": "f", "base": {"steps": 5, "problem": {"name": "quadratic",
          "dim": 4}, "optimizer": {"name": "sgd", "lr": 0.1}}, "seeds": [1, 2]})"),
        d.path.string(), "f");
    bitlab::SweepOptions o;
    o.out_dir = (d.path / "out").string();
    o.binary = "/bin/false";
    o.quiet = true;
    o.jobs = 2;
    CHECK(bitlab::run_sweep(spec, o) == 3);
    const auto csv =
        csv_without(slurp(d.path / "out" / "sweep.csv"), {"optimizer", "workers", "problem"});
    REQUIRE(csv.size() == 3);
    CHECK(csv[1].find("1,1,failed,") == 0);
    CHECK(csv[2].find("2,2,failed,") == 0);
    CHECK(fs::exists(d.path / "out" / "run-001_seed=1" / "stderr.txt"));
    // With the real binary, --resume re-runs the failed runs.
    o.binary = BITLAB_BINARY;
    o.resume = true;
    CHECK(bitlab::run_sweep(spec, o) == 0);
    CHECK(slurp(d.path / "out" / "sweep.csv").find("failed") == std::string::npos);
  }

  TEST_CASE("--resume re-runs only the runs without a finished summary") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", R"({"base": "base.json", "seeds": [1, 2, 3]})");
    const auto out = d.path / "out";
    REQUIRE(run_bitlab(d, "sweep " + file + " --out " + out.string() + " --quiet").status == 0);
    CHECK(lock_files(out).empty());  // the sweep's and its runs' locks ended with them
    const auto csv_before = csv_without(slurp(out / "sweep.csv"), {"wall_s"});
    // A marker in every run folder; run 2 loses its summary (as if killed).
    for (const char* r : {"run-001_seed=1", "run-002_seed=2", "run-003_seed=3"}) {
      std::ofstream(out / r / "marker") << "x";
    }
    fs::remove(out / "run-002_seed=2" / "summary.json");
    Result r = run_bitlab(d, "sweep " + file + " --out " + out.string() + " --resume");
    CHECK(r.status == 0);
    CHECK(r.err.find("2 finished before, skipped") != std::string::npos);
    CHECK(fs::exists(out / "run-001_seed=1" / "marker"));
    CHECK(fs::exists(out / "run-003_seed=3" / "marker"));
    CHECK(!fs::exists(out / "run-002_seed=2" / "marker"));  // removed and re-run
    CHECK(fs::exists(out / "run-002_seed=2" / "summary.json"));
    CHECK(csv_without(slurp(out / "sweep.csv"), {"wall_s"}) == csv_before);
    CHECK(no_tmp_left(out));
    CHECK(lock_files(out).empty());  // nor after --resume
    // A different sweep in the same folder is refused, even with --resume.
    const auto other = d.file("o.json", R"({"base": "base.json", "seeds": [4]})");
    Result ro = run_bitlab(d, "sweep " + other + " --out " + out.string() + " --resume");
    CHECK(ro.status == 2);
    CHECK(ro.err.find("different sweep") != std::string::npos);
  }

  TEST_CASE("Ctrl-C or SIGTERM stops the sweep: exit 128 + signal, the csv lists what finished") {
    // SIGTERM: what Slurm sends the sweep at a time limit; it is forwarded as is.
    for (const int sig : {SIGINT, SIGTERM}) {
      INFO("signal " << sig);
      TempDir d;
      const auto file = d.file("long.json", R"({"name": "long",
      "base": {"steps": 100000000, "problem": {"name": "quadratic", "dim": 1000},
               "cluster": {"workers": 2}, "optimizer": {"name": "sgd", "lr": 0.01}},
      "seeds": [1, 2, 3, 4]})");
      const auto out = d.path / "out";
      const pid_t pid = fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        execl(BITLAB_BINARY, BITLAB_BINARY, "sweep", file.c_str(), "--out", out.c_str(), "--jobs",
              "2", static_cast<char*>(nullptr));
        _exit(127);
      }
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      const auto m1 = out / "run-001_seed=1" / "metrics.csv";
      const auto m2 = out / "run-002_seed=2" / "metrics.csv";
      while (std::chrono::steady_clock::now() < deadline &&
             (!fs::exists(m1) || fs::file_size(m1) < 5000 || !fs::exists(m2) ||
              fs::file_size(m2) < 5000)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (sig == SIGINT) {
        // While it runs, a second --resume of the same sweep is refused, naming
        // the process that holds the folder (it would re-run the same runs).
        const Result second =
            run_bitlab(d, "sweep " + file + " --out " + out.string() + " --resume");
        CHECK(second.status == 2);
        CHECK(second.err.find(out.string() + " is being written by process " + std::to_string(pid) +
                              " (bitlab sweep of long)") != std::string::npos);
        // The lock files exist while the sweep and its runs are under way.
        CHECK(fs::exists(out / ".bitlab.lock"));
        CHECK(fs::exists(out / "run-001_seed=1" / ".bitlab.lock"));
      }
      kill(pid, sig);  // the sweep alone: it forwards to its children
      int raw = 0;
      waitpid(pid, &raw, 0);
      REQUIRE(WIFEXITED(raw));
      CHECK(WEXITSTATUS(raw) == 128 + sig);
      const auto csv = csv_without(slurp(out / "sweep.csv"), {});
      REQUIRE(csv.size() == 3);  // the two runs under way; runs 3 and 4 never started
      CHECK(csv[1].find(",interrupted,") != std::string::npos);
      CHECK(csv[2].find(",interrupted,") != std::string::npos);
      CHECK(!fs::exists(out / "run-003_seed=3"));
      const Json s = Json::parse(slurp(out / "run-001_seed=1" / "summary.json"));
      CHECK(s["status"] == "interrupted");
      CHECK(s["signal"] == (sig == SIGINT ? "SIGINT" : "SIGTERM"));
      CHECK(lock_files(out).empty());  // an interrupted sweep is finished too
    }
  }
}

TEST_SUITE("sweep") {
  TEST_CASE("a swept path inside another swept path is refused") {
    const Json raw = Json::parse(R"({"base": {"steps": 2, "problem": {"name": "quadratic"},
        "optimizer": {"name": "adam"}},
        "grid": {"optimizer.lr": [0.1, 0.2]},
        "zip": {"optimizer": [{"name": "adam"}, {"name": "sgd"}]}})");
    std::string msg;
    try {
      bitlab::resolve_sweep(raw, ".", "nested", false);
    } catch (const bitlab::ConfigError& e) {
      msg = e.what();
    }
    CHECK(msg.find("grid.optimizer.lr") == 0);
    CHECK(msg.find("lies inside the also swept zip.optimizer") != std::string::npos);
  }
}

TEST_SUITE("sweep") {
  TEST_CASE("--shard i/k runs a share each; --merge writes the unsharded sweep.csv") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", R"({"base": "base.json", "seeds": [1, 2, 3, 4, 5]})");
    const auto whole = d.path / "whole";
    REQUIRE(run_bitlab(d, "sweep " + file + " --out " + whole.string() + " --quiet").status == 0);
    const auto out = d.path / "sharded";
    const std::string base_args = "sweep " + file + " --out " + out.string() + " --quiet";
    REQUIRE(run_bitlab(d, base_args + " --shard 0/2").status == 0);
    // Shard 0 of 2 ran runs 1, 3, 5 only.
    CHECK(fs::exists(out / "run-001_seed=1" / "summary.json"));
    CHECK_FALSE(fs::exists(out / "run-002_seed=2"));
    CHECK(fs::exists(out / "run-005_seed=5" / "summary.json"));
    CHECK(csv_without(slurp(out / "sweep.shard-0-of-2.csv"), {}).size() == 4);  // header + 3
    // Merging before shard 1 ran names the missing shard.
    Result early = run_bitlab(d, base_args + " --merge");
    CHECK(early.status == 2);
    CHECK(early.err.find("sweep.shard-1-of-2.csv is missing") != std::string::npos);
    CHECK_FALSE(fs::exists(out / "sweep.csv"));
    REQUIRE(run_bitlab(d, base_args + " --shard 1/2").status == 0);
    Result merged = run_bitlab(d, base_args + " --merge");
    CHECK(merged.status == 0);
    CHECK(merged.out == out.string() + "\n");
    CHECK(csv_without(slurp(out / "sweep.csv"), {"wall_s"}) ==
          csv_without(slurp(whole / "sweep.csv"), {"wall_s"}));
  }

  // Under a Slurm array job (or mpirun: the mpi suite) the shard comes from
  // the launcher; ids count from the array's minimum.
  TEST_CASE("--shard auto takes a Slurm array task's index and count; none: exit 2") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", R"({"base": "base.json", "seeds": [1, 2, 3]})");
    const auto out = d.path / "o";
    const std::string args = "sweep " + file + " --out " + out.string() + " --quiet --shard auto";
    const Result none = run_bitlab(d, args);
    CHECK(none.status == 2);
    CHECK(none.err.find("--shard auto: no launcher rank in the environment") != std::string::npos);
    CHECK_FALSE(fs::exists(out));
    const Result r = run_bitlab(
        d, args, "SLURM_ARRAY_TASK_ID=7 SLURM_ARRAY_TASK_MIN=6 SLURM_ARRAY_TASK_COUNT=2");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(fs::exists(out / "sweep.shard-1-of-2.csv"));  // task 7 of 6..7: shard 1 of 2
    CHECK(fs::exists(out / "run-002_seed=2" / "summary.json"));
    CHECK_FALSE(fs::exists(out / "run-001_seed=1"));
  }

  TEST_CASE("a bad --shard exits 2 naming the flag and the rule") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", R"({"base": "base.json", "seeds": [1, 2]})");
    for (const char* bad : {"2/2", "-1/2", "1", "a/b", "0/0", "1/2x"}) {
      CAPTURE(bad);
      Result r =
          run_bitlab(d, "sweep " + file + " --out " + (d.path / "o").string() + " --shard " + bad);
      CHECK(r.status == 2);
      CHECK(r.err.find("--shard") != std::string::npos);
      CHECK_FALSE(fs::exists(d.path / "o"));
    }
  }
}

TEST_SUITE("sweep") {
  TEST_CASE("a run's warnings: in the closing summary, grouped, and in sweep.csv's column") {
    TempDir d;
    const auto file = d.file("w.json", kWarnedSweep);
    const auto out = d.path / "out";
    const Result r = run_bitlab(d, "sweep " + file + " --out " + out.string() + " --jobs 2");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const Json warned = Json::parse(
        slurp(out / "run-003_optimizer.name=onebit_adam_seed=1" / "summary.json"))["warnings"];
    REQUIRE(warned.size() >= 1);
    const std::string first = warned[0].get<std::string>();
    CHECK(first.find("never compresses") != std::string::npos);
    // The summary: each kind of warning once, with its count and runs.
    CHECK_MESSAGE(r.err.find("warnings (" + std::to_string(warned.size()) + " kind" +
                             (warned.size() == 1 ? "" : "s") +
                             ", in 2 of 4 runs; sweep.csv's warnings column has each run's "
                             "own):") != std::string::npos,
                  r.err);
    CHECK(r.err.find("in 2 runs (runs 3, 4): " + first) != std::string::npos);
    // sweep.csv: the last column, the run's warnings joined by " | ", empty for adam.
    std::istringstream csv(slurp(out / "sweep.csv"));
    std::string line;
    std::getline(csv, line);
    const auto header = csv_cells(line);
    REQUIRE(header.back() == "warnings");
    std::string joined;
    for (const auto& w : warned) joined += (joined.empty() ? "" : " | ") + w.get<std::string>();
    int rows = 0;
    while (std::getline(csv, line)) {
      const auto cells = csv_cells(line);
      REQUIRE(cells.size() == header.size());
      const bool onebit = cells[header.size() - 2].find("onebit_adam") != std::string::npos;
      CHECK(cells.back() == (onebit ? joined : ""));
      ++rows;
    }
    CHECK(rows == 4);
    // A sweep without warnings says none.
    const auto quiet_file = d.file("q.json", R"({"name": "q",
      "base": {"steps": 5, "problem": {"name": "quadratic", "dim": 4},
               "optimizer": {"name": "adam", "lr": 0.01}}, "seeds": [1]})");
    const Result q = run_bitlab(d, "sweep " + quiet_file + " --out " + (d.path / "q").string());
    REQUIRE(q.status == 0);
    CHECK(q.err.find("warnings (") == std::string::npos);
  }

  TEST_CASE("--dry-run lists the runs and what differs once resolved; runs and writes nothing") {
    TempDir d;
    d.file("base.json", kBase);
    const auto file = d.file("s.json", kSweep);
    const auto out = d.path / "out";
    const Result r = run_bitlab(d, "sweep " + file + " --out " + out.string() + " --dry-run");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK_FALSE(fs::exists(out));
    CHECK(r.out.find("sweep t: 8 runs into " + out.string() + " (dry run") != std::string::npos);
    // Each run by its folder, with its swept values and the defaults that
    // come with its optimizer (freeze_step for onebit_adam only).
    CHECK(r.out.find("run-001_optimizer.lr=0.01_optimizer.name=adam_optimizer.bias_correction=true_"
                     "seed=1: ") != std::string::npos);
    std::istringstream lines(r.out);
    std::string line;
    int listed = 0;
    while (std::getline(lines, line)) {
      if (line.find("  run-") != 0) continue;
      ++listed;
      const bool onebit = line.find("optimizer.name=onebit_adam") != std::string::npos;
      CHECK(line.find("optimizer.lr=") != std::string::npos);
      CHECK(line.find("seed=") != std::string::npos);
      CHECK((line.find("optimizer.freeze_step=100") != std::string::npos) == onebit);
      CHECK(line.find("steps=") == std::string::npos);  // the same in every run
    }
    CHECK(listed == 8);
    // The sweep's warnings (bias_correction differs between the optimizers) come too.
    CHECK(r.err.find("optimizer.bias_correction differs") != std::string::npos);
    // A bad sweep is still exit 2.
    const auto bad = d.file("bad.json", R"({"base": "base.json", "grid": {"optimizer.lr": [-1]}})");
    CHECK(run_bitlab(d, "sweep " + bad + " --dry-run").status == 2);
  }
}

TEST_SUITE("sweep") {
  // In process: the lock file exists while held, is gone after; a process that opened
  // the file just before its holder removed it holds only an orphan, and a new lock takes
  // the path's new file (the constructor's inode check is what a FolderLock relies on).
  TEST_CASE("FolderLock: held while alive, removed at the end, an orphan does not share it") {
    const fs::path dir = fs::temp_directory_path() / ("traps-lock-" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path file = dir / ".bitlab.lock";
    {
      bitlab::FolderLock a(dir.string(), ".bitlab.lock", "test a");
      CHECK(fs::exists(file));
      CHECK_THROWS_AS(bitlab::FolderLock(dir.string(), ".bitlab.lock", "test b"),
                      bitlab::ConfigError);
    }
    CHECK_FALSE(fs::exists(file));
    // The race the inode check is for: B opens the file, A removes it and ends, and B's
    // flock succeeds on a file no longer at the path (a FolderLock in B's place sees the
    // inode differ and retries). The orphan does not lock the folder: C takes the new file,
    // and D is refused while C holds it.
    std::optional<bitlab::FolderLock> a;
    a.emplace(dir.string(), ".bitlab.lock", "test a");
    const int b = open(file.c_str(), O_RDWR);
    REQUIRE(b >= 0);
    a.reset();  // unlinks, then releases
    CHECK(flock(b, LOCK_EX | LOCK_NB) == 0);  // B holds the orphan
    {
      bitlab::FolderLock c(dir.string(), ".bitlab.lock", "test c");
      CHECK(fs::exists(file));
      CHECK_THROWS_AS(bitlab::FolderLock(dir.string(), ".bitlab.lock", "test d"),
                      bitlab::ConfigError);
    }
    close(b);
    CHECK_FALSE(fs::exists(file));
    fs::remove_all(dir);
  }
}
