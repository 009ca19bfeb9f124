// `bitlab plot` and notebooks/plot.py, end to end. The error paths need only
// /usr/bin/python3 (plot.py checks its input before importing matplotlib);
// a real figure is drawn only where python3-matplotlib is installed, and the
// test says so when it skips. Bad input exits 2 and a failed write 4, with one
// line `bitlab: error: ...` and never a traceback.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli_fixtures.hpp"
#include "tests/tmpfs_mount.hpp"

namespace fs = std::filesystem;

using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::run_shell;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;

namespace bitlab::testing {
// Defined in test_report.cpp: `status`, one line "bitlab: error: <what>...", no traceback.
void check_stopped(const Result& r, int status, const std::string& what);
}  // namespace bitlab::testing

using bitlab::testing::check_stopped;

namespace {

bool have_python() {
  return access("/usr/bin/python3", X_OK) == 0;
}

bool have_matplotlib() {
  return have_python() &&
         std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}

// A tiny run (40 steps, priced by a network preset so sim_time_s exists).
std::string make_run(const TempDir& d, const std::string& name, double lr, int seed) {
  const std::string exp = d.file("exp.json", R"({
    "name": "plottest", "steps": 40, "eval_every": 10,
    "problem": {"name": "logistic", "dim": 5, "samples": 256},
    "cluster": {"workers": 4, "batch_size": 8},
    "optimizer": {"name": "adam", "lr": 0.05},
    "network": {"preset": "ethernet_10g_a100x8"}
  })");
  const std::string out = (d.path / "runs" / name).string();
  const Result r = run_bitlab(d, "run " + exp + " --out " + out + " --quiet --set optimizer.lr=" +
                                     std::to_string(lr) + " --set seed=" + std::to_string(seed));
  REQUIRE(r.status == 0);
  return out;
}

// The text a reader sees in an SVG drawn by plot.py (svg.fonttype "none" writes each label
// as a <text> element), one element per line. Searching the whole file instead would also
// match path coordinates and clip-path ids, which are arbitrary numbers and hashes (a clip
// id once contained "1e6").
std::string svg_text(const std::string& svg) {
  std::string text;
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at)) {
    const size_t open_end = svg.find('>', at);
    const size_t close = svg.find("</text>", open_end);
    if (open_end == std::string::npos || close == std::string::npos) break;
    bool in_tag = false;  // drop nested <tspan ...> tags, keep their text
    for (size_t k = open_end + 1; k < close; ++k) {
      if (svg[k] == '<') in_tag = true;
      if (!in_tag) text += svg[k];
      if (svg[k] == '>') in_tag = false;
    }
    text += '\n';
    at = close;
  }
  return text;
}

}  // namespace

TEST_SUITE("plot") {
  TEST_CASE("a folder with no runs is bad input, without matplotlib") {
    TempDir d;
    fs::create_directories(d.path / "empty");
    const Result r = run_bitlab(d, "plot " + (d.path / "empty").string());
    CHECK(r.status == 2);
    if (!have_python()) {
      CHECK(r.err.find("python3") != std::string::npos);
      return;
    }
    CHECK(r.err.find("no runs found") != std::string::npos);
    CHECK(r.out.empty());
  }

  TEST_CASE("an unknown metric lists the available ones") {
    if (!have_python()) {
      MESSAGE("skipped: /usr/bin/python3 is missing (Debian package python3)");
      return;
    }
    TempDir d;
    const std::string run = make_run(d, "a", 0.05, 1);
    Result r = run_bitlab(d, "plot " + run + " --metric nope");
    CHECK(r.status == 2);
    CHECK(r.err.find("'nope'") != std::string::npos);
    CHECK(r.err.find("available: ") != std::string::npos);
    CHECK(r.err.find("eval_loss") != std::string::npos);
    r = run_bitlab(d, "plot " + run + " --x nope");
    CHECK(r.status == 2);
    CHECK(r.err.find("x column 'nope'") != std::string::npos);
    CHECK_FALSE(fs::exists(fs::path(run) / "plot.png"));
  }

  TEST_CASE("without matplotlib: a message naming the Debian package, exit 2") {
    if (!have_python()) {
      MESSAGE("skipped: /usr/bin/python3 is missing (Debian package python3)");
      return;
    }
    TempDir d;
    const std::string run = make_run(d, "a", 0.05, 1);
    // -S leaves out site, hence Debian's dist-packages: matplotlib cannot be imported.
    const Result r = run_shell(
        d, std::string("/usr/bin/python3 -S ") + BITLAB_SOURCE_DIR + "/notebooks/plot.py " + run);
    CHECK(r.status == 2);
    CHECK(r.err.find("matplotlib is not installed for /usr/bin/python3: install the Debian "
                     "package python3-matplotlib (apt-get install python3-matplotlib)") !=
          std::string::npos);
  }

  TEST_CASE("a missing script names the path tried") {
    TempDir d;
    const Result r = run_bitlab(d, "plot " + d.path.string(), "BITLAB_NOTEBOOKS=/nonexistent-nb");
    CHECK(r.status == 2);
    if (have_python()) {
      CHECK(r.err.find("/nonexistent-nb/plot.py") != std::string::npos);
      CHECK(r.err.find("BITLAB_NOTEBOOKS") != std::string::npos);
    }
  }

  TEST_CASE("two learning rates by two seeds: PNG and SVG, grouped by seed") {
    if (!have_matplotlib()) {
      MESSAGE(
          "skipped: matplotlib is not importable by /usr/bin/python3 (Debian package "
          "python3-matplotlib)");
      return;
    }
    TempDir d;
    for (double lr : {0.05, 0.01}) {
      for (int seed : {1, 2}) {
        make_run(d, "lr" + std::to_string(lr) + "-s" + std::to_string(seed), lr, seed);
      }
    }
    const std::string runs = (d.path / "runs").string();
    const std::string prefix = (d.path / "fig").string();
    Result r = run_bitlab(d, "plot " + runs + " --out " + prefix + " --logy --title T");
    REQUIRE(r.status == 0);
    CHECK(r.out == prefix + ".png\n" + prefix + ".svg\n" + prefix + ".pdf\n");
    CHECK(r.err.find("4 runs in 2 curves") != std::string::npos);
    const std::string png = slurp(prefix + ".png");
    const std::string svg_file = slurp(prefix + ".svg");
    const std::string svg = svg_text(svg_file);
    REQUIRE(png.size() > 1000);
    CHECK(png.compare(0, 8, "\x89PNG\r\n\x1a\n") == 0);
    CHECK(slurp(prefix + ".pdf").rfind("%PDF", 0) == 0);
    CHECK(svg_file.find("<svg") != std::string::npos);
    // The legend: the swept path as a header, its values in order; the seeds note.
    CHECK(svg.find("lr") != std::string::npos);
    CHECK(svg.find("0.01") < svg.find("0.05"));
    CHECK(svg.find("line: mean over 2 seeds") != std::string::npos);

    // --where keeps the runs it names (a unique last part of the path will do); --smooth
    // is stated on the figure.
    r = run_bitlab(d, "plot " + runs + " --out " + prefix + " --where lr=0.05 --smooth 3");
    REQUIRE(r.status == 0);
    CHECK(r.err.find("2 runs in 1 curves") != std::string::npos);
    CHECK(svg_text(slurp(prefix + ".svg")).find("EMA over 3 points") != std::string::npos);
    r = run_bitlab(d, "plot " + runs + " --out " + prefix + " --where lr=0.3");
    CHECK(r.status == 2);
    CHECK(r.err.find("--where leaves no runs") != std::string::npos);
    r = run_bitlab(d, "plot " + runs + " --out " + prefix + " --where nosuch=1");
    CHECK(r.status == 2);
    CHECK(r.err.find("no config path 'nosuch'") != std::string::npos);

    // An eval metric (sparse rows), the default output name, one x axis.
    r = run_bitlab(d, "plot " + runs + " --metric eval_loss --x bytes_sent_cum");
    REQUIRE(r.status == 0);
    CHECK(fs::file_size(fs::path(runs) / "plot-eval_loss.png") > 0);
    CHECK(fs::file_size(fs::path(runs) / "plot-eval_loss.svg") > 0);

    // A sweep folder: sweep.csv's dir column, relative or absolute; a run not yet written is
    // left out with a note.
    fs::create_directories(d.path / "sweep");
    fs::rename(fs::path(runs) / "lr0.050000-s1", d.path / "sweep" / "r0");
    d.file("sweep/sweep.csv",
           "run,optimizer.lr,seed,status,dir\n"
           "0,0.05,1,completed,r0\n"
           "1,0.01,1,completed," +
               (fs::path(runs) / "lr0.010000-s1").string() +
               "\n"
               "2,0.01,2,pending,r2\n");
    r = run_bitlab(d, "plot " + (d.path / "sweep").string());
    REQUIRE(r.status == 0);
    CHECK(r.err.find("2 runs in 2 curves") != std::string::npos);
    CHECK(r.err.find("left out") != std::string::npos);
    CHECK(fs::file_size(d.path / "sweep" / "plot.png") > 0);
  }

  TEST_CASE("a compression sweep: legends as a person writes them, --logx") {
    if (!have_matplotlib()) {
      MESSAGE("skipped: matplotlib is not importable by /usr/bin/python3 (python3-matplotlib)");
      return;
    }
    // Adam, and 1-bit Adam with its default compressor (sign), 4-bit and top-10 % stages:
    // the swept paths (optimizer.name, worker_compressor.name, bits) are null where a
    // setting has no such option; the labels must not say so.
    TempDir d;
    const std::string sweep = d.file("sweep.json", R"({
      "name": "cs", "base": {"name": "cs", "steps": 40, "eval_every": 10,
        "problem": {"name": "logistic", "dim": 5, "samples": 256},
        "cluster": {"workers": 4, "batch_size": 8},
        "optimizer": {"name": "adam", "lr": 0.05},
        "network": {"preset": "ethernet_10g_a100x8"}},
      "zip": {"optimizer": [
        {"name": "adam", "lr": 0.05},
        {"name": "onebit_adam", "lr": 0.05, "freeze_step": 10},
        {"name": "onebit_adam", "lr": 0.05, "freeze_step": 10,
         "worker_compressor": {"name": "nbit", "bits": 4},
         "server_compressor": {"name": "nbit", "bits": 4}},
        {"name": "onebit_adam", "lr": 0.05, "freeze_step": 10,
         "worker_compressor": {"name": "topk", "ratio": 0.1, "error_feedback": false},
         "server_compressor": {"name": "topk", "ratio": 0.1, "error_feedback": false}}]}
    })");
    const std::string out = (d.path / "cs").string();
    Result r = run_bitlab(d, "sweep " + sweep + " --quiet --jobs 2 --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string prefix = (d.path / "fig").string();
    r = run_bitlab(d, "plot " + out + " --out " + prefix + " --logx");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string svg = svg_text(slurp(prefix + ".svg"));
    for (const char* label : {"\nadam\n", "\nonebit_adam, 1-bit (sign)\n", "\nonebit_adam, 4-bit\n",
                              "\nonebit_adam, top-k 10 %, no error feedback\n"}) {
      CHECK_MESSAGE(svg.find(label) != std::string::npos, label, "\n", svg);
    }
    CHECK_MESSAGE(svg.find("null") == std::string::npos, svg);
    // Log x axes (passed through by `bitlab plot`): decades, 100B and 1kB on the bytes axis
    // (about 25 B to 1.5 kB); a linear axis is labelled 0B, 500B, 1kB, 1.5kB.
    CHECK_MESSAGE(svg.find("\n100B\n") != std::string::npos, svg);
    CHECK(svg.find("\n500B\n") == std::string::npos);
    // By default the bytes axis is logarithmic too, since 1-bit Adam changes phase (its
    // warm-up's bytes would squash the compressed phase); the step axis stays linear.
    r = run_bitlab(d, "plot " + out + " --out " + prefix);
    REQUIRE(r.status == 0);
    std::string plain = svg_text(slurp(prefix + ".svg"));
    CHECK_MESSAGE(plain.find("\n100B\n") != std::string::npos, plain);
    CHECK(plain.find("\n500B\n") == std::string::npos);
    CHECK(plain.find("\n15\n") != std::string::npos);  // steps 0, 15, 30: a linear axis
    // The simulated time has no compute in it: its axis says so.
    CHECK(plain.find("simulated time (communication only)") != std::string::npos);
    r = run_bitlab(d, "plot " + out + " --out " + prefix + " --linx");
    REQUIRE(r.status == 0);
    CHECK(svg_text(slurp(prefix + ".svg")).find("\n500B\n") != std::string::npos);
    r = run_bitlab(d, "plot " + out + " --out " + prefix + " --linx --logx");
    CHECK(r.status != 0);  // one or the other
  }

  TEST_CASE("a sweep's values as written: freeze_step=25% (step 10) in the legend") {
    if (!have_matplotlib()) {
      MESSAGE("skipped: matplotlib is not importable by /usr/bin/python3 (python3-matplotlib)");
      return;
    }
    TempDir d;
    const std::string sweep = d.file("sweep.json", R"({
      "name": "pct", "base": {"steps": 40, "problem": {"name": "logistic", "dim": 5,
        "samples": 256}, "cluster": {"workers": 4, "batch_size": 8},
        "optimizer": {"name": "onebit_adam", "lr": 0.05}},
      "grid": {"optimizer.freeze_step": ["25%", "50%"]}})");
    const std::string out = (d.path / "pct").string();
    Result r = run_bitlab(d, "sweep " + sweep + " --quiet --jobs 2 --out " + out);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    CHECK(fs::exists(fs::path(out) / "run-001_optimizer.freeze_step=25%"));
    const std::string prefix = (d.path / "fig").string();
    r = run_bitlab(d, "plot " + out + " --out " + prefix);
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string svg = svg_text(slurp(prefix + ".svg"));
    CHECK_MESSAGE(svg.find("\n25% (step 10)\n") != std::string::npos, svg);
    CHECK(svg.find("\n50% (step 20)\n") != std::string::npos);
  }

  TEST_CASE("a run that blew up is cut, marked and kept out of the y limits") {
    if (!have_matplotlib()) {
      MESSAGE("skipped: matplotlib is not importable by /usr/bin/python3 (python3-matplotlib)");
      return;
    }
    // Hand-written run folders: three learning rates, the largest blowing up to 1e7 by step
    // 3 (and stopping there as diverged), the others near 1.
    TempDir d;
    const char* lrs[] = {"0.01", "0.1", "10"};
    for (int k = 0; k < 3; ++k) {
      const std::string run = std::string("runs/r") + std::to_string(k) + "/";
      d.file(run + "config.json",
             std::string(R"({"name": "blow", "optimizer": {"lr": )") + lrs[k] + "}}");
      std::string csv = "step,train_loss,bytes_sent_cum\n";
      for (int step = 1; step <= (k == 2 ? 3 : 20); ++step) {
        const double loss = k == 2 ? (step < 3 ? 1.0 : 1e7) : 1.0 / (1.0 + 0.1 * step * (k + 1));
        csv += std::to_string(step) + "," + std::to_string(loss) + "," +
               std::to_string(100 * step) + "\n";
      }
      d.file(run + "metrics.csv", csv);
      d.file(run + "summary.json",
             std::string(R"({"status": ")") + (k == 2 ? "diverged" : "completed") + "\"}");
    }
    const std::string prefix = (d.path / "fig").string();
    Result r = run_bitlab(d, "plot " + (d.path / "runs").string() + " --out " + prefix);
    REQUIRE(r.status == 0);
    CHECK(r.err.find("3 runs in 3 curves") != std::string::npos);
    const std::string svg = svg_text(slurp(prefix + ".svg"));
    CHECK(svg.find("diverged / blew up") != std::string::npos);
    // The y axis keeps the scale of the runs that trained: no tick label or offset in the
    // millions (matplotlib would write the offset as "1e7").
    CHECK(svg.find("1e7") == std::string::npos);
    CHECK(svg.find("1e6") == std::string::npos);
    CHECK(svg.find("1.2") != std::string::npos);  // a tick label near the curves' range
  }

  TEST_CASE("a run killed mid-write is drawn as unfinished, without its torn row") {
    if (!have_matplotlib()) {
      MESSAGE("skipped: matplotlib is not importable by /usr/bin/python3 (python3-matplotlib)");
      return;
    }
    // Two hand-written runs: one completed; one killed by SIGKILL at step 7 (no
    // summary.json, metrics.csv ending in half a row).
    TempDir d;
    for (int k = 0; k < 2; ++k) {
      const std::string run = std::string("runs/r") + std::to_string(k) + "/";
      d.file(run + "config.json",
             std::string(R"({"name": "torn", "optimizer": {"lr": )") + (k ? "0.2" : "0.1") + "}}");
      std::string csv = "step,train_loss,bytes_sent_cum\n";
      for (int step = 1; step <= (k == 1 ? 7 : 20); ++step) {
        csv += std::to_string(step) + "," + std::to_string(1.0 / step) + "," +
               std::to_string(100 * step) + "\n";
      }
      if (k == 1) csv += "8,0.12";  // the torn row
      d.file(run + "metrics.csv", csv);
      if (k == 0) d.file(run + "summary.json", R"({"status": "completed"})");
    }
    const std::string prefix = (d.path / "fig").string();
    Result r = run_bitlab(d, "plot " + (d.path / "runs").string() + " --out " + prefix);
    REQUIRE(r.status == 0);
    CHECK(r.err.find("metrics.csv ends in a torn row: left out") != std::string::npos);
    CHECK(r.err.find("unfinished: drawn up to its last step and marked as unfinished") !=
          std::string::npos);
    CHECK(svg_text(slurp(prefix + ".svg")).find("unfinished (interrupted,") != std::string::npos);
  }

  TEST_CASE("bad input exits 2 naming the file, a failed write 4, never a traceback") {
    if (!have_python()) {
      MESSAGE("skipped: /usr/bin/python3 is missing (Debian package python3)");
      return;
    }
    TempDir d;
    const std::string config = R"({"name": "bad", "optimizer": {"lr": 0.1}})";
    const std::string metrics = "step,train_loss,bytes_sent_cum\n1,1.0,100\n2,0.5,200\n";
    const std::string summary = R"({"status": "completed"})";
    d.file("runs/r/config.json", config);
    d.file("runs/r/metrics.csv", metrics);
    d.file("runs/r/summary.json", summary);
    const std::string runs = (d.path / "runs").string(), run = runs + "/r/";
    const std::string fig = (d.path / "fig").string();
    auto plot = [&](const std::string& out) {
      return run_bitlab(d, "plot " + runs + " --out " + out);
    };
    // Checked before matplotlib is imported: these need only python3.
    d.file("runs/r/summary.json", "[]");
    check_stopped(plot(fig), 2, run + "summary.json: holds a JSON array, not an object");
    d.file("runs/r/summary.json", R"({"status": 1})");
    check_stopped(plot(fig), 2, run + "summary.json: status = 1: must be a string");
    d.file("runs/r/summary.json", R"({"time": {"sim_time_s": "1 s"}})");
    check_stopped(plot(fig), 2, run + "summary.json: time.sim_time_s = \"1 s\": must be a number");
    d.file("runs/r/summary.json", summary);
    d.file("runs/r/metrics.csv", "step,train_loss\n1,\xff\n");
    check_stopped(plot(fig), 2, run + "metrics.csv: not UTF-8 text (byte 0xff at offset 18)");
    d.file("runs/r/metrics.csv", std::string("step\0,x\n", 8));
    check_stopped(plot(fig), 2, run + "metrics.csv: a NUL byte at offset 4: not a text file");
    d.file("runs/r/metrics.csv", "loss\n1\n");
    check_stopped(plot(fig), 2, run + "metrics.csv: no step column");
    d.file("runs/r/metrics.csv", metrics);
    d.file("runs/r/config.json", "{\"name\": \"\xe9\"}");
    check_stopped(plot(fig), 2, run + "config.json: not UTF-8 text (byte 0xe9 at offset 10)");
    d.file("runs/r/config.json", "{\"name\": ");
    check_stopped(plot(fig), 2, run + "config.json: not valid JSON");
    d.file("runs/r/config.json", config);
    d.file("runs/sweep.csv", "run,dir\n0,\xff\n");
    check_stopped(plot(fig), 2, runs + "/sweep.csv: not UTF-8 text");
    fs::remove(d.path / "runs" / "sweep.csv");
    CHECK_FALSE(fs::exists(fig + ".png"));

    if (!have_matplotlib()) {
      MESSAGE("skipped the write checks: matplotlib is not importable by /usr/bin/python3");
      return;
    }
    // Writes the system refuses: exit 4, naming the file and the reason, nothing left behind.
    check_stopped(plot("/proc/x"), 4, "cannot write /proc/x.png: No such file or directory");
    // A file size limit stands in for a full disk (Python ignores SIGXFSZ: the write fails).
    check_stopped(run_shell(d, "ulimit -f 20; " + std::string(BITLAB_BINARY) + " plot " + runs +
                                   " --out " + fig),
                  4, "cannot write " + fig + ".png: File too large");
    for (const auto& e : fs::directory_iterator(d.path)) {
      CHECK_MESSAGE(e.path().filename().string().rfind("fig", 0) != 0, e.path());
    }
    if (geteuid() != 0) {
      fs::create_directories(d.path / "ro");
      fs::permissions(d.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
      check_stopped(plot((d.path / "ro" / "fig").string()), 4,
                    "cannot write " + (d.path / "ro" / "fig.png").string() + ": Permission denied");
      fs::permissions(d.path / "ro", fs::perms::owner_all);
    } else if (const bitlab::testing::TmpfsMount ro(d.path / "ro", 64, true); ro.mounted) {
      // Root writes into a folder whatever its permissions, not into a
      // read-only file system.
      check_stopped(
          plot((d.path / "ro" / "fig").string()), 4,
          "cannot write " + (d.path / "ro" / "fig.png").string() + ": Read-only file system");
    } else {
      MESSAGE(
          "the read-only folder check is skipped: permissions do not stop root, and a "
          "read-only tmpfs could not be mounted; /proc stands in");
    }
    const Result r = plot(fig);  // and with all of it put right, the figure is drawn
    CHECK(r.status == 0);
    CHECK(fs::file_size(fig + ".png") > 0);
  }
}
