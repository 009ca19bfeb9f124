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
#include <map>
#include <sstream>
#include <thread>

#include "sim/core/state_archive.hpp"
#include "sim/engine/run.hpp"
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
      // PowerSGD's state: the error rows, Q's warm start, the draws made.
      {"mlp_adam.json", with({R"(optimizer.gradient_exchange={"name": "powersgd",
                                 "start_powerSGD_iter": 10, "matrix_approximation_rank": 2})"})},
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

// The entries of an archive: each one's name, where its values begin and
// their bytes (the layout: name length u16, name, type u8, count u64, values).
struct Entry {
  std::string name;
  size_t data = 0, size = 0;
};
std::vector<Entry> entries(const std::string& bytes) {
  std::vector<Entry> out;
  size_t at = 0;
  while (at + 11 <= bytes.size()) {
    uint16_t len = 0;
    std::memcpy(&len, bytes.data() + at, sizeof len);
    Entry e{bytes.substr(at + 2, len), at + 11 + len, 0};
    const uint8_t type = static_cast<uint8_t>(bytes[at + 2 + len]);
    uint64_t count = 0;
    std::memcpy(&count, bytes.data() + at + 3 + len, sizeof count);
    e.size = count * (type == 1 ? 1 : type % 16);  // bool, or the element's bytes
    at = e.data + e.size;
    out.push_back(std::move(e));
  }
  return out;
}

// Zeroes the values of every entry whose name starts with `prefix`.
std::string zero_entries(std::string bytes, const std::string& prefix) {
  for (const Entry& e : entries(bytes)) {
    if (e.name.rfind(prefix, 0) == 0) std::fill_n(bytes.begin() + e.data, e.size, '\0');
  }
  return bytes;
}

// Where the values of the first entry `name` begin; npos when there is none.
size_t entry_value_at(const std::string& bytes, const std::string& name) {
  for (const Entry& e : entries(bytes)) {
    if (e.name == name) return e.data;
  }
  return std::string::npos;
}

// The checksum recomputed after an edit, as bitlab seals it (the last 8
// bytes hash every byte before them): what a deliberate edit, rather than
// damage, looks like, so that the checks behind the seal are reached.
std::string resealed(std::string bytes) {
  const uint64_t sum = fnv1a64(std::string_view(bytes).substr(0, bytes.size() - 8));
  std::memcpy(bytes.data() + bytes.size() - 8, &sum, sizeof sum);
  return bytes;
}

// `bytes` with the 8 bytes at `at` set to `value`, resealed.
std::string with_u64(std::string bytes, size_t at, uint64_t value) {
  REQUIRE(at != std::string::npos);
  std::memcpy(bytes.data() + at, &value, sizeof value);
  return resealed(std::move(bytes));
}

// Every file in a run folder and its content, but the lock file (whose note
// names the last process that took the lock).
std::map<std::string, std::string> folder_snapshot(const fs::path& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename() == ".bitlab.lock") continue;
    files[fs::relative(e.path(), dir).string()] =
        e.is_regular_file() ? slurp(e.path()) : std::string("(folder)");
  }
  return files;
}

// A small run with checkpoints at steps 10 and 20 of 30, as a kill after
// step 20 leaves it (no summary.json); returns its folder.
fs::path stopped_small_run(const TempDir& d, const std::string& name) {
  const auto file = d.file("small.json", R"({"steps": 30,
    "problem": {"name": "quadratic", "dim": 4}, "cluster": {"workers": 2},
    "optimizer": {"name": "onebit_adam", "freeze_step": 5}})");
  const fs::path dir = d.path / name;
  const Result r =
      run_bitlab(d, "run " + file + " --quiet --checkpoint-every 10 --out " + dir.string());
  REQUIRE(r.status == 0);
  fs::remove(dir / "summary.json");
  return dir;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
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
        first.serialize(saved);
        StateArchive loading(saved.bytes(), "test");
        Simulation resumed(e);
        resumed.serialize(loading);
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
    first.serialize(saved);
    StateArchive planted(zero_entries(saved.bytes(), "onebit"), "planted");
    resumed.serialize(planted);
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
    a.serialize(saved);
    StateArchive loading(saved.bytes(), "ckpt.bin");
    try {
      b.serialize(loading);
      FAIL("a checkpoint of another problem size was accepted");
    } catch (const ConfigError& err) {
      CHECK(std::string(err.what()).find("ckpt.bin: entry \"cluster.params\"") !=
            std::string::npos);
    }
    StateArchive truncated(saved.bytes().substr(0, saved.bytes().size() / 2), "ckpt.bin");
    Simulation c(e1);
    CHECK_THROWS_AS(c.serialize(truncated), ConfigError);
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
    CHECK_FALSE(fs::exists(stopped / ".bitlab.lock"));  // an interrupted run removes its lock
    const Result r = run_bitlab(d, "run --resume " + stopped.string() + " --quiet");
    REQUIRE(r.status == 0);
    CHECK_FALSE(fs::exists(stopped / ".bitlab.lock"));  // and so does its resume
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
    const auto at = ckpt.find("bitlab-checkpoint-2");
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

  TEST_CASE("a checkpoint with any single byte changed is refused, the folder untouched") {
    // In process (RunSession resumes as `run --resume` does; its ConfigError
    // is the command's exit 2): every byte of a small run's checkpoint, once
    // with all its bits flipped and once with one bit.
    TempDir d;
    const fs::path dir = stopped_small_run(d, "run");
    const std::string good = slurp(dir / "checkpoint.bin");
    INFO("checkpoint.bin: " << good.size() << " bytes");
    const ResumePoint point = resume_point(dir.string());
    RunOptions o;
    o.out_dir = dir.string();
    o.resume = true;
    o.quiet = true;
    o.print_dir = false;
    o.checkpoint_every = point.checkpoint_every;
    // Damage within the format entry can read as another format; anywhere
    // else it is a failed checksum.
    const size_t format_end = entry_value_at(good, "format") + std::strlen("bitlab-checkpoint-2");
    size_t refused = 0;
    for (size_t pos = 0; pos < good.size(); ++pos) {
      for (const unsigned mask : {0xFFu, 1u << (pos % 8)}) {
        std::string bad = good;
        bad[pos] = static_cast<char>(static_cast<unsigned char>(bad[pos]) ^ mask);
        write_bytes(dir / "checkpoint.bin", bad);
        const auto before = folder_snapshot(dir);
        try {
          RunSession session(point.experiment, o);
          FAIL("byte " << pos << " ^ " << mask << ": accepted");
        } catch (const ConfigError& err) {
          const std::string what = err.what();
          ++refused;
          const bool damage = what.find("checkpoint.bin: checksum mismatch (the file is damaged)") !=
                              std::string::npos;
          const bool format = pos < format_end && what.find(": format \"") != std::string::npos;
          if (!damage && !format) FAIL("byte " << pos << ": " << what);
        }
        if (folder_snapshot(dir) != before) FAIL("byte " << pos << ": the folder changed");
      }
    }
    CHECK(refused == 2 * good.size());
    // The intact checkpoint still resumes.
    write_bytes(dir / "checkpoint.bin", good);
    RunSession session(point.experiment, o);
    while (session.step()) {
    }
    CHECK(session.finish() == 0);
  }

  TEST_CASE("through the binary: the header's and the seal's bytes and a sample: exit 2") {
    TempDir d;
    const fs::path dir = stopped_small_run(d, "run");
    const std::string straight = without_wall_column(slurp(dir / "metrics.csv"));
    const std::string good = slurp(dir / "checkpoint.bin");
    // The header (format, version, config hash, where the csvs ended), the
    // step counter, the seal (the last 27 bytes: its name, type, count and
    // checksum) and a sample of the rest, evenly spread.
    const size_t header_end = entry_value_at(good, "files.comm_log_bytes") + 8;
    const size_t step_at = entry_value_at(good, "simulation.step");
    REQUIRE(step_at != std::string::npos);
    std::vector<size_t> positions;
    for (size_t p = 0; p < header_end; ++p) positions.push_back(p);
    for (size_t p = step_at; p < step_at + 8; ++p) positions.push_back(p);
    for (size_t p = good.size() - 27; p < good.size(); ++p) positions.push_back(p);
    for (size_t k = 1; k <= 24; ++k) {
      positions.push_back(header_end + k * (good.size() - 27 - header_end) / 25);
    }
    for (const size_t pos : positions) {
      std::string bad = good;
      bad[pos] = static_cast<char>(~bad[pos]);
      write_bytes(dir / "checkpoint.bin", bad);
      const auto before = folder_snapshot(dir);
      const Result r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
      if (r.status != 2 || r.err.find("checkpoint.bin") == std::string::npos) {
        FAIL("byte " << pos << ": exit " << r.status << ": " << r.err);
      }
      if (folder_snapshot(dir) != before) FAIL("byte " << pos << ": the folder changed");
    }
    MESSAGE(positions.size() << " positions of " << good.size() << " bytes refused with exit 2");
    write_bytes(dir / "checkpoint.bin", good);
    REQUIRE(run_bitlab(d, "run --resume " + dir.string() + " --quiet").status == 0);
    CHECK(without_wall_column(slurp(dir / "metrics.csv")) == straight);
  }

  TEST_CASE("checkpoints that pass the checksum but not the checks behind it: exit 2") {
    // Each edit is resealed, as a deliberate edit (or a bug) would leave it:
    // the issue's cases, each refused naming what is wrong, nothing changed.
    TempDir d;
    const fs::path dir = stopped_small_run(d, "run");
    const std::string good = slurp(dir / "checkpoint.bin");
    const size_t step = entry_value_at(good, "simulation.step");
    const size_t metrics = entry_value_at(good, "files.metrics_bytes");
    const size_t comm_log = entry_value_at(good, "files.comm_log_bytes");
    const size_t warnings = entry_value_at(good, "tally.warnings");
    const size_t phases = entry_value_at(good, "tally.phases");
    const size_t phase_name = entry_value_at(good, "phase.name");  // a string's count before it
    const uint64_t metrics_size = fs::file_size(dir / "metrics.csv");
    uint64_t metrics_good = 0, comm_log_good = 0;  // where the csvs ended at step 20
    std::memcpy(&metrics_good, good.data() + metrics, sizeof metrics_good);
    std::memcpy(&comm_log_good, good.data() + comm_log, sizeof comm_log_good);
    const auto equals = [](uint64_t v) { return " = " + std::to_string(v) + ": "; };
    // Step 25 with the last phase's steps to match: rows 21-25 would be lost.
    size_t last_phase_steps = 0;
    for (const auto& e : entries(good)) {
      if (e.name == "phase.steps") last_phase_steps = e.data;
    }
    int64_t phase_steps = 0;
    std::memcpy(&phase_steps, good.data() + last_phase_steps, sizeof phase_steps);
    const std::string step_25 = with_u64(with_u64(good, step, 25), last_phase_steps,
                                         static_cast<uint64_t>(phase_steps + 5));
    const std::vector<std::pair<std::string, std::string>> cases = {
        {step_25, equals(metrics_good) + (dir / "metrics.csv").string() + " holds 20 rows"},
        {with_u64(good, step, 25), "the phases' step counts do not add up to step 25"},
        {with_u64(good, step, 1000000), "step 1000000: must be in [1, 30)"},
        {with_u64(good, step, 0), "step 0: must be in [1, 30)"},
        {with_u64(good, metrics, 0), "shorter than the header"},
        {with_u64(good, metrics, metrics_size + 1), "shorter than at the checkpoint"},
        {with_u64(good, metrics, metrics_good - 1), equals(metrics_good - 1)},  // mid-row
        {with_u64(good, metrics, metrics_good - 3), equals(metrics_good - 3)},
        {with_u64(good, comm_log, 60), "files.comm_log_bytes = 60: shorter than the header"},
        {with_u64(good, comm_log, comm_log_good - 1), equals(comm_log_good - 1)},
        {with_u64(good, warnings, uint64_t{1} << 62), "tally.warnings\": counts"},
        {with_u64(good, warnings, uint64_t{1} << 63), "tally.warnings\": counts"},
        {with_u64(good, warnings, uint64_t{1} << 40), "(the file is damaged)"},
        {with_u64(good, phases, uint64_t{1} << 62), "tally.phases\": counts"},
        {with_u64(good, phase_name - 8, uint64_t{1} << 62), "phase.name\": holds"},
        {with_u64(good, phase_name - 8, uint64_t{1} << 63), "phase.name\": holds"},
    };
    for (const auto& [bytes, expected] : cases) {
      INFO(expected);
      write_bytes(dir / "checkpoint.bin", bytes);
      const auto before = folder_snapshot(dir);
      const Result r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
      CHECK(r.status == 2);
      CHECK(r.err.find(expected) != std::string::npos);
      CHECK(r.err.find("checkpoint.bin") != std::string::npos);
      CHECK(folder_snapshot(dir) == before);
    }
    // Another bitlab's checkpoint: the version is named.
    std::string other = good;
    const size_t version = entry_value_at(good, "bitlab_version");
    other[version] = other[version] == '9' ? '8' : '9';
    write_bytes(dir / "checkpoint.bin", resealed(other));
    Result r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
    CHECK(r.status == 2);
    CHECK(r.err.find(": written by bitlab 9") != std::string::npos);
    CHECK(r.err.find(", this is ") != std::string::npos);
    // A checkpoint of format 1 (no seal, no version): its format is named.
    StateArchive old;
    std::string format = "bitlab-checkpoint-1", config = "{}";
    old.field("format", format);
    old.field("config", config);
    write_bytes(dir / "checkpoint.bin", old.bytes());
    r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
    CHECK(r.status == 2);
    CHECK(r.err.find("format \"bitlab-checkpoint-1\", this bitlab reads \"bitlab-checkpoint-2\"") !=
          std::string::npos);
    // A cut-off file, an empty one.
    for (const std::string& cut : {good.substr(0, good.size() / 2), std::string()}) {
      write_bytes(dir / "checkpoint.bin", cut);
      r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
      CHECK(r.status == 2);
      CHECK(r.err.find("checkpoint.bin: checksum mismatch (the file is damaged)") !=
            std::string::npos);
    }
    // A folder in its place.
    fs::remove(dir / "checkpoint.bin");
    fs::create_directory(dir / "checkpoint.bin");
    r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
    CHECK(r.status == 2);
    CHECK(r.err.find("checkpoint.bin is not a regular file") != std::string::npos);
    fs::remove(dir / "checkpoint.bin");
    // Unreadable (root reads anything: checked only for others).
    write_bytes(dir / "checkpoint.bin", good);
    if (geteuid() != 0) {
      fs::permissions(dir / "checkpoint.bin", fs::perms::none);
      r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
      CHECK(r.status == 2);
      CHECK(r.err.find("checkpoint.bin: cannot be read") != std::string::npos);
      fs::permissions(dir / "checkpoint.bin", fs::perms::owner_read | fs::perms::owner_write);
    }
    REQUIRE(run_bitlab(d, "run --resume " + dir.string() + " --quiet").status == 0);
  }

  TEST_CASE("--resume removes the partial checkpoints a kill mid-write left") {
    TempDir d;
    const fs::path dir = stopped_small_run(d, "run");
    const std::string good = slurp(dir / "checkpoint.bin");
    write_bytes(dir / "checkpoint.bin.tmp.12345", good.substr(0, 100));  // killed mid-write
    write_bytes(dir / "checkpoint.bin.tmp.999999", "");
    write_bytes(dir / "checkpoint.bin.tmp.notes", "not bitlab's");
    // A refused resume leaves them too (it changes nothing).
    write_bytes(dir / "checkpoint.bin", good.substr(0, 50));
    Result r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
    CHECK(r.status == 2);
    CHECK(fs::exists(dir / "checkpoint.bin.tmp.12345"));
    write_bytes(dir / "checkpoint.bin", good);
    r = run_bitlab(d, "run --resume " + dir.string() + " --quiet");
    REQUIRE(r.status == 0);
    CHECK_FALSE(fs::exists(dir / "checkpoint.bin.tmp.12345"));
    CHECK_FALSE(fs::exists(dir / "checkpoint.bin.tmp.999999"));
    CHECK(fs::exists(dir / "checkpoint.bin.tmp.notes"));  // not a name bitlab writes
  }

  TEST_CASE("StateArchive: lengths are bounded by the bytes left; the seal catches any change") {
    StateArchive saved;
    std::vector<double> v = {1.0, 2.0, 3.0};
    std::string text = "hello";
    saved.growing("v", v);
    saved.field("text", text);
    saved.seal();
    const std::string bytes = saved.bytes();
    {
      StateArchive io(bytes, "a.bin");
      CHECK(io.verify_seal());
      std::vector<double> w;
      std::string t;
      io.growing("v", w);
      io.field("text", t);
      io.expect_end();  // the seal is not an entry to read
      CHECK(w == v);
      CHECK(t == text);
    }
    for (size_t pos = 0; pos < bytes.size(); ++pos) {
      std::string bad = bytes;
      bad[pos] = static_cast<char>(bad[pos] ^ 0x10);
      StateArchive io(bad, "a.bin");
      CHECK_FALSE(io.verify_seal());
    }
    // Counts that wrap around (2^61 doubles are 0 bytes in 64 bits) or exceed the file.
    for (const uint64_t n : {uint64_t{1} << 61, uint64_t{1} << 62, uint64_t{1} << 63, uint64_t{1000}}) {
      std::string bad = bytes;
      std::memcpy(bad.data() + 2 + 1 + 1, &n, sizeof n);  // v's count
      StateArchive io(bad, "a.bin");
      std::vector<double> w;
      CHECK_THROWS_WITH_AS(io.growing("v", w), doctest::Contains("bytes are left"), ConfigError);
    }
    // A count of entries that cannot fit.
    StateArchive counted;
    uint64_t n = uint64_t{1} << 40;
    counted.count("n", n);
    StateArchive io(counted.bytes(), "a.bin");
    uint64_t m = 0;
    CHECK_THROWS_WITH_AS(io.count("n", m), doctest::Contains("counts 1099511627776 entries"),
                         ConfigError);
  }
}
