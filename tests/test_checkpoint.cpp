// Checkpoints: a run saved at step k and resumed continues exactly as the
// uninterrupted run (docs/results.md "Checkpoints"). In process, for every
// optimizer with its phases, the resumed simulation's parameters and metrics
// equal the uninterrupted one's bit for bit at every step; through the binary,
// a run killed with SIGKILL mid-way and resumed with --resume writes the same
// metrics.csv (but for wall_s) and comm_log.csv as an uninterrupted run.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "sim/core/state_archive.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using namespace bitlab;
using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::slurp;
using bitlab::testing::without_wall_column;
using bitlab::testing::TempDir;

namespace {

// The convergence experiments of each optimizer (their phases switch early:
// freeze_step, var_freeze_step and local steps fall within 40 steps here).
struct Case {
  const char* file;
  std::vector<std::string> sets;
};

std::vector<Case> cases() {
  const std::vector<std::string> small = {"steps=60", "cluster.workers=4", "eval_every=20"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> s = small;
    s.insert(s.end(), extra.begin(), extra.end());
    return s;
  };
  return {
      {"mlp_adam.json", small},
      {"mlp_lamb.json", small},
      {"mlp_onebit_adam.json", with({"optimizer.freeze_step=20"})},
      {"mlp_apmsqueeze.json", with({"optimizer.freeze_step=20"})},
      {"mlp_onebit_lamb.json", with({"optimizer.freeze_step=20"})},
      {"mlp_zero_one_adam.json",
       with({"optimizer.var_freeze_step=20", "optimizer.local_step_scaler=8"})},
      // One 1-bit allreduce per tensor: every tensor's errors (and LAMB's
      // reused padding) are state.
      {"mlp_onebit_adam.json", with({"optimizer.freeze_step=20", "optimizer.granularity=tensor"})},
      {"mlp_onebit_lamb.json", with({"optimizer.freeze_step=20", "optimizer.granularity=tensor"})},
      {"mlp_zero_one_adam.json",
       with({"optimizer.var_freeze_step=20", "optimizer.local_step_scaler=8",
             "optimizer.granularity=tensor"})},
      {"mlp_loco.json", small},
      {"mlp_binsgdm.json", small},
  };
}

Experiment load_case(const Case& c) {
  const auto path = fs::path(BITLAB_SOURCE_DIR) / "experiments" / "convergence" / c.file;
  return load_experiment(path.string(), c.sets);
}

bool same_bits(double a, double b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Everything deterministic in a step's metrics (wall times are not).
void check_same_step(const StepMetrics& a, const StepMetrics& b) {
  CHECK(a.step == b.step);
  CHECK(std::string(a.phase) == std::string(b.phase));
  CHECK(same_bits(a.train_loss, b.train_loss));
  CHECK(same_bits(a.grad_norm, b.grad_norm));
  CHECK(a.eval.size() == b.eval.size());
  for (size_t k = 0; k < a.eval.size() && k < b.eval.size(); ++k) {
    CHECK(same_bits(a.eval[k], b.eval[k]));
  }
  CHECK(same_bits(a.bytes_sent_cum, b.bytes_sent_cum));
  CHECK(a.messages_cum == b.messages_cum);
  CHECK(same_bits(a.sim_time_s, b.sim_time_s));
}

// Starts `bitlab ARGS...` in the background; returns its process id.
pid_t spawn_bitlab(const std::vector<std::string>& args) {
  const pid_t pid = fork();
  if (pid != 0) return pid;
  freopen("/dev/null", "w", stdout);
  freopen("/dev/null", "w", stderr);
  std::vector<char*> argv = {const_cast<char*>(BITLAB_BINARY)};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(BITLAB_BINARY, argv.data());
  _exit(127);
}

// Waits (at most 60 s) until `path` exists and `csv` holds more than `bytes`.
void wait_for(const fs::path& path, const fs::path& csv, uintmax_t bytes) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::error_code ec;
  while (std::chrono::steady_clock::now() < deadline &&
         !(fs::exists(path, ec) && fs::file_size(csv, ec) > bytes)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Zeroes the values of every entry whose name starts with `prefix` (the
// archive's layout: name length u16, name, type u8, count u64, values).
std::string zero_entries(std::string bytes, const std::string& prefix) {
  size_t at = 0;
  while (at < bytes.size()) {
    uint16_t len = 0;
    std::memcpy(&len, bytes.data() + at, sizeof len);
    const std::string name = bytes.substr(at + 2, len);
    const uint8_t type = static_cast<uint8_t>(bytes[at + 2 + len]);
    uint64_t count = 0;
    std::memcpy(&count, bytes.data() + at + 3 + len, sizeof count);
    const size_t size = type == 1 ? 1 : type % 16;  // bool, or the element's bytes
    const size_t data = at + 11 + len;
    if (name.rfind(prefix, 0) == 0) std::fill_n(bytes.begin() + data, count * size, '\0');
    at = data + count * size;
  }
  return bytes;
}

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("a simulation saved at step k and loaded into a fresh one continues bit for bit") {
    for (const Case& c : cases()) {
      INFO(c.file);
      const Experiment e = load_case(c);
      for (const int64_t k : {int64_t{10}, int64_t{35}}) {  // before and after the switch
        INFO("checkpoint at step " << k);
        Simulation straight(e);
        Simulation first(e);
        for (int64_t t = 1; t <= k; ++t) {
          straight.step();
          first.step();
        }
        StateArchive saved;
        first.state(saved);
        StateArchive loading(saved.bytes(), "test");
        Simulation resumed(e);
        resumed.state(loading);
        loading.expect_end();
        CHECK(resumed.steps_done() == k);
        for (int64_t t = k + 1; t <= e.run.steps; ++t) {
          const StepMetrics& a = straight.step();
          const StepMetrics& b = resumed.step();
          check_same_step(a, b);
        }
        const auto pa = straight.cluster().params();
        const auto pb = resumed.cluster().params();
        CHECK(std::memcmp(pa.data(), pb.data(), pa.size_bytes()) == 0);
        CHECK(straight.collectives() == resumed.collectives());
      }
    }
  }

  TEST_CASE("a planted omission is caught: a state that loses the optimizer's moments") {
    // The check above must be able to fail: resuming 1-bit Adam from a state
    // whose moments and error buffers are zeroed (what a state() that forgot
    // them would leave) departs from the uninterrupted run at once.
    const Experiment e = load_case(cases()[2]);
    Simulation straight(e), first(e), resumed(e);
    for (int t = 1; t <= 35; ++t) {
      straight.step();
      first.step();
    }
    StateArchive saved;
    first.state(saved);
    StateArchive planted(zero_entries(saved.bytes(), "onebit"), "planted");
    resumed.state(planted);
    // The loss of the next step is taken before its update: the difference
    // shows in the parameters after it, and in the loss one step later.
    straight.step();
    resumed.step();
    const auto pa = straight.cluster().params();
    const auto pb = resumed.cluster().params();
    CHECK(std::memcmp(pa.data(), pb.data(), pa.size_bytes()) != 0);
    CHECK_FALSE(same_bits(straight.step().train_loss, resumed.step().train_loss));
  }

  TEST_CASE("a checkpoint of another run is refused, naming the entry") {
    const Experiment e1 = load_case(cases()[0]);
    Case other = cases()[0];
    other.sets.push_back("problem.hidden=8");
    const Experiment e2 = load_case(other);
    Simulation a(e1), b(e2);
    a.step();
    StateArchive saved;
    a.state(saved);
    StateArchive loading(saved.bytes(), "ckpt.bin");
    try {
      b.state(loading);
      FAIL("a checkpoint of another problem size was accepted");
    } catch (const ConfigError& err) {
      CHECK(std::string(err.what()).find("ckpt.bin: entry \"cluster.params\"") !=
            std::string::npos);
    }
    StateArchive truncated(saved.bytes().substr(0, saved.bytes().size() / 2), "ckpt.bin");
    Simulation c(e1);
    CHECK_THROWS_AS(c.state(truncated), ConfigError);
  }

  TEST_CASE("killed with SIGKILL and resumed, a run's files equal an uninterrupted run's") {
    // Every optimizer with phases, through the binary. 800 steps of the MLP
    // take about a second: the run is killed soon after its first checkpoint
    // (step 50), long before its end.
    TempDir d;
    size_t exercised = 0, index = 0;
    for (const Case& c : cases()) {
      INFO(c.file);
      const auto file = (fs::path(BITLAB_SOURCE_DIR) / "experiments" / "convergence" / c.file);
      std::vector<std::string> args = {"run", file.string(), "--quiet", "--threads", "1"};
      for (const auto& s : c.sets) {
        if (s.rfind("steps=", 0) == 0) continue;
        args.push_back("--set");
        args.push_back(s);
      }
      args.push_back("--set");
      args.push_back("steps=800");
      // Named by position too: a file may appear with several option sets.
      const std::string name = std::to_string(index++) + "." + c.file;
      const fs::path straight = d.path / (name + ".straight");
      const fs::path killed = d.path / (name + ".killed");
      auto straight_args = args;
      straight_args.insert(straight_args.end(), {"--out", straight.string()});
      auto killed_args = args;
      killed_args.insert(killed_args.end(), {"--out", killed.string(), "--checkpoint-every", "50"});
      int raw = 0;
      waitpid(spawn_bitlab(straight_args), &raw, 0);
      REQUIRE(WIFEXITED(raw));
      REQUIRE(WEXITSTATUS(raw) == 0);
      const pid_t pid = spawn_bitlab(killed_args);
      // After the first checkpoint, with rows written past it.
      wait_for(killed / "checkpoint.bin", killed / "metrics.csv", 6000);
      kill(pid, SIGKILL);
      waitpid(pid, &raw, 0);
      if (!WIFSIGNALED(raw)) {
        MESSAGE("the run ended before it was killed; the resume was not exercised");
        continue;
      }
      ++exercised;
      CHECK_FALSE(fs::exists(killed / "summary.json"));
      const Result r = run_bitlab(d, "run --resume " + killed.string() + " --quiet");
      REQUIRE(r.status == 0);
      CHECK(without_wall_column(slurp(killed / "metrics.csv")) ==
            without_wall_column(slurp(straight / "metrics.csv")));
      CHECK(slurp(killed / "comm_log.csv") == slurp(straight / "comm_log.csv"));
      const Json a = Json::parse(slurp(straight / "summary.json"));
      const Json b = Json::parse(slurp(killed / "summary.json"));
      CHECK(b["status"] == "completed");
      CHECK(b["resumed_from_step"].get<int64_t>() % 50 == 0);
      CHECK(a["totals"] == b["totals"]);
      CHECK(a["phases"].dump() == b["phases"].dump());
      CHECK(a["final"] == b["final"]);
    }
    CHECK(exercised > 0);  // a machine too fast to kill any run mid-way tests nothing
  }

  TEST_CASE("SIGTERM writes a checkpoint at the step it stops; --resume finishes the run") {
    TempDir d;
    const auto file =
        (fs::path(BITLAB_SOURCE_DIR) / "experiments/convergence/mlp_onebit_adam.json");
    const fs::path straight = d.path / "straight", stopped = d.path / "stopped";
    const std::string common = "run " + file.string() +
                               " --quiet --set steps=800 --set cluster.workers=4"
                               " --set optimizer.freeze_step=20";
    REQUIRE(run_bitlab(d, common + " --out " + straight.string()).status == 0);
    const pid_t pid = spawn_bitlab({"run", file.string(), "--quiet", "--set", "steps=800", "--set",
                                    "cluster.workers=4", "--set", "optimizer.freeze_step=20",
                                    "--out", stopped.string(), "--checkpoint-every", "1000000"});
    wait_for(stopped / "metrics.csv", stopped / "metrics.csv", 6000);
    kill(pid, SIGTERM);
    int raw = 0;
    waitpid(pid, &raw, 0);
    REQUIRE(WIFEXITED(raw));
    if (WEXITSTATUS(raw) == 0) {
      MESSAGE("the run ended before the signal; the resume was not exercised");
      return;
    }
    CHECK(WEXITSTATUS(raw) == 128 + SIGTERM);
    CHECK(fs::exists(stopped / "checkpoint.bin"));  // at the stop, not at a multiple of K
    const Result r = run_bitlab(d, "run --resume " + stopped.string() + " --quiet");
    REQUIRE(r.status == 0);
    CHECK(without_wall_column(slurp(stopped / "metrics.csv")) ==
          without_wall_column(slurp(straight / "metrics.csv")));
    CHECK(slurp(stopped / "comm_log.csv") == slurp(straight / "comm_log.csv"));
  }

  TEST_CASE("--resume refuses what it cannot resume, exit 2, nothing changed") {
    TempDir d;
    const auto file = (fs::path(BITLAB_SOURCE_DIR) / "experiments/convergence/mlp_adam.json");
    const fs::path done = d.path / "done", plain = d.path / "plain";
    const std::string base = "run " + file.string() + " --quiet --set steps=30";
    REQUIRE(run_bitlab(d, base + " --out " + done.string() + " --checkpoint-every 10").status == 0);
    Result r = run_bitlab(d, "run --resume " + done.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("already completed") != std::string::npos);
    // An interrupted-looking run without a checkpoint.
    REQUIRE(run_bitlab(d, base + " --out " + plain.string()).status == 0);
    fs::remove(plain / "summary.json");
    r = run_bitlab(d, "run --resume " + plain.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("no checkpoint.bin") != std::string::npos);
    r = run_bitlab(d, "run --resume " + (d.path / "nothing").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("holds no run") != std::string::npos);
    r = run_bitlab(d, "run " + file.string() + " --resume " + done.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("takes no experiment file") != std::string::npos);
    // A config.json edited after the checkpoint.
    fs::remove(done / "summary.json");
    const std::string metrics_before = slurp(done / "metrics.csv");
    std::string config = slurp(done / "config.json");
    config.replace(config.find("\"seed\": 1"), 9, "\"seed\": 2");
    std::ofstream(done / "config.json") << config;
    r = run_bitlab(d, "run --resume " + done.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("written for another experiment") != std::string::npos);
    CHECK(slurp(done / "metrics.csv") == metrics_before);
    // A checkpoint of another format (an older bitlab).
    std::string ckpt = slurp(done / "checkpoint.bin");
    const auto at = ckpt.find("bitlab-checkpoint-1");
    REQUIRE(at != std::string::npos);
    ckpt[at + 18] = '0';
    std::ofstream(done / "checkpoint.bin", std::ios::binary) << ckpt;
    config.replace(config.find("\"seed\": 2"), 9, "\"seed\": 1");
    std::ofstream(done / "config.json") << config;
    r = run_bitlab(d, "run --resume " + done.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("format \"bitlab-checkpoint-0\"") != std::string::npos);
    CHECK(slurp(done / "metrics.csv") == metrics_before);
  }

  TEST_CASE("sweep --resume continues a half-finished run from its checkpoint") {
    TempDir d;
    d.file("a.json", R"({"steps": 30, "problem": {"name": "quadratic", "dim": 64},
      "cluster": {"workers": 4}, "optimizer": {"name": "onebit_adam", "freeze_step": 5}})");
    const auto sweep = d.file("s.json", R"({"name": "ck", "base": "a.json", "seeds": [1, 2]})");
    const fs::path out = d.path / "sweep";
    REQUIRE(
        run_bitlab(d, "sweep " + sweep + " --jobs 2 --checkpoint-every 10 --out " + out.string())
            .status == 0);
    const fs::path run = out / "run-001_seed=1";
    const std::string metrics = without_wall_column(slurp(run / "metrics.csv"));
    // As a killed run leaves it: no summary, rows past the checkpoint (step 20).
    fs::remove(run / "summary.json");
    REQUIRE(run_bitlab(d, "sweep " + sweep + " --jobs 2 --resume --out " + out.string()).status ==
            0);
    const Json s = Json::parse(slurp(run / "summary.json"));
    CHECK(s["resumed_from_step"] == 20);
    CHECK(without_wall_column(slurp(run / "metrics.csv")) == metrics);
  }
}
