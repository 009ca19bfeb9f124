// `bitlab runs` and `bitlab report`, end to end. The report page is opened in
// a real browser: headless Chromium (Debian's `chromium`) loads report.html
// from disk, the page writes what it rendered into <div id="bitlab-checks">
// (notebooks/report.py), and the test reads it from --dump-dom; a screenshot
// is kept as a test artefact at <build>/test-artefacts/report.png. Without
// Chromium or python3-plotly the browser test says why it skipped.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "sim/core/human.hpp"
#include "sim/core/schema.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;

using bitlab::Json;
using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::run_shell;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;

namespace {

bool have(const std::string& check) {
  return std::system((check + " >/dev/null 2>&1").c_str()) == 0;
}

// Three tiny runs (40 steps, timed by a network preset) under DIR/tree: Adam at
// two learning rates and 1-bit Adam, so phases and collectives differ.
fs::path make_tree(const TempDir& d) {
  const std::string exp = d.file("exp.json", R"({
    "name": "reporttest", "steps": 40, "eval_every": 10,
    "problem": {"name": "logistic", "dim": 5, "samples": 256},
    "cluster": {"workers": 4, "batch_size": 8},
    "optimizer": {"name": "adam", "lr": 0.05},
    "network": {"preset": "ethernet_10g_a100x8"}
  })");
  const fs::path tree = d.path / "tree";
  const char* sets[] = {"--set optimizer.lr=0.05", "--set optimizer.lr=0.01",
                        "--set optimizer.name=onebit_adam --set optimizer.freeze_step=10"};
  const char* names[] = {"adam-a", "adam-b", "onebit"};
  for (int k = 0; k < 3; ++k) {
    const Result r = run_bitlab(
        d, "run " + exp + " --quiet --out " + (tree / names[k]).string() + " " + sets[k]);
    REQUIRE(r.status == 0);
  }
  return tree;
}

std::string attribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  if (std::regex_search(dom, m, std::regex(name + "=\"([^\"]*)\""))) return m[1];
  return "<missing>";
}

}  // namespace

TEST_SUITE("report") {
  TEST_CASE("numbers for people: decimal byte units, durations, never an exponent") {
    using bitlab::human_bytes;
    using bitlab::human_duration;
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(812) == "812 B");
    CHECK(human_bytes(999.4) == "999 B");
    CHECK(human_bytes(999.6) == "1 kB");  // rounds up into the next unit, not "1000 B"
    CHECK(human_bytes(1440) == "1.44 kB");
    CHECK(human_bytes(23.634e6) == "23.6 MB");
    CHECK(human_bytes(2.49838e8) == "250 MB");
    CHECK(human_bytes(1.18e15) == "1.18 PB");  // was "1.18e+03 TB"
    CHECK(human_bytes(5e21) == "5000 EB");
    CHECK(human_duration(0) == "0 s");
    CHECK(human_duration(720e-6) == "720 us");
    CHECK(human_duration(0.586e-3) == "586 us");
    CHECK(human_duration(0.0123) == "12.3 ms");
    CHECK(human_duration(12.34) == "12.3 s");
    CHECK(human_duration(252) == "4.20 min");
    CHECK(human_duration(3 * 3600 + 180) == "3.05 h");
    CHECK(human_duration(2.1 * 86400) == "2.10 days");
  }

  TEST_CASE("bitlab runs: a table for people, csv and json with raw numbers") {
    TempDir d;
    const fs::path tree = make_tree(d);
    Result r = run_bitlab(d, "runs " + tree.string());
    REQUIRE(r.status == 0);
    CHECK(r.err.find("3 runs") != std::string::npos);
    for (const char* s : {"adam-a", "adam-b", "onebit", "onebit_adam", "lr=0.01", "completed",
                          "40/40", "logistic", " kB", " ms"}) {
      CHECK_MESSAGE(r.out.find(s) != std::string::npos, s, "\n", r.out);
    }
    r = run_bitlab(d, "runs " + tree.string() + " --json");
    REQUIRE(r.status == 0);
    const Json j = Json::parse(r.out);
    REQUIRE(j.size() == 3);
    CHECK(j[2]["optimizer"] == "onebit_adam");
    CHECK(j[2]["options"]["freeze_step"] == 10);
    // Raw numbers: the bytes summary.json holds.
    const Json s = Json::parse(slurp(tree / "onebit" / "summary.json"));
    CHECK(j[2]["bytes_sent_per_worker"] == s["totals"]["bytes_sent_per_worker"]);
    r = run_bitlab(d, "runs " + tree.string() + " --csv");
    REQUIRE(r.status == 0);
    CHECK(r.out.rfind("run,experiment,optimizer,options,workers,problem,seed,status,", 0) == 0);
    r = run_bitlab(d, "runs " + (d.path / "nope").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("no such folder") != std::string::npos);
  }

  TEST_CASE("bitlab report: a page headless Chromium loads with no JavaScript errors") {
    if (!have("/usr/bin/python3 -c 'import plotly'")) {
      MESSAGE(
          "skipped: plotly is not importable by /usr/bin/python3 (Debian package "
          "python3-plotly; ./setup.sh installs it)");
      return;
    }
    TempDir d;
    const fs::path tree = make_tree(d);
    Result r = run_bitlab(d, "report " + tree.string() + " --baseline adam-a");
    REQUIRE(r.status == 0);
    const fs::path page = tree / "report.html";
    CHECK(r.out == page.string() + "\n");
    const std::string html = slurp(page);
    // Self-contained: plotly.js inline (the browser below has no network either).
    CHECK(html.find("<script src=") == std::string::npos);
    CHECK(html.find("speed-up") != std::string::npos);
    // The baseline's own speed-up is 1 and its loss gap 0.
    CHECK(html.find(">1.00×<") != std::string::npos);
    CHECK(html.find(">+0<") != std::string::npos);
    // A baseline given as PATH=VALUE on the config.
    r = run_bitlab(d, "report " + tree.string() + " --baseline optimizer.name=onebit_adam --out " +
                          (d.path / "b.html").string());
    CHECK(r.status == 0);
    CHECK(slurp(d.path / "b.html").find("Baseline (highlighted): onebit") != std::string::npos);
    // Bad input: an unknown baseline, exit 2, no page.
    r = run_bitlab(
        d, "report " + tree.string() + " --baseline nope --out " + (d.path / "x.html").string());
    CHECK(r.status == 2);
    CHECK(r.err.find("--baseline nope") != std::string::npos);
    CHECK(!fs::exists(d.path / "x.html"));

    if (access("/usr/bin/chromium", X_OK) != 0) {
      MESSAGE(
          "skipped the browser check: /usr/bin/chromium is missing (Debian package "
          "chromium; ./setup.sh installs it)");
      return;
    }
    // --virtual-time-budget lets the page's load handler run before the DOM is dumped;
    // every host name fails to resolve, so a page that fetched plotly.js from the network
    // would show data-plotly="missing" and no traces.
    const std::string chromium =
        "/usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run "
        "--host-resolver-rules='MAP * ~NOTFOUND' "
        "--user-data-dir=" +
        (d.path / "profile").string() + " --virtual-time-budget=5000 ";
    r = run_shell(d, chromium + "--dump-dom file://" + page.string() + " 2>/dev/null");
    REQUIRE(r.status == 0);
    const std::string dom = r.out;
    CHECK(attribute(dom, "data-errors") == "[]");
    CHECK(attribute(dom, "data-plotly") != "missing");
    CHECK(attribute(dom, "data-rows") == "3");
    const std::string traces = attribute(dom, "data-traces");
    CHECK(traces == attribute(dom, "data-expected-traces"));
    // At least one loss trace per run on each of the three x axes.
    CHECK(std::atoi(traces.c_str()) >= 9);

    // Next to the binary under test: the build folder, wherever the tests run from.
    const fs::path artefacts = fs::path(BITLAB_BINARY).parent_path() / "test-artefacts";
    fs::create_directories(artefacts);
    const fs::path shot = artefacts / "report.png";
    fs::remove(shot);
    r = run_shell(d, chromium + "--window-size=1280,2400 --screenshot=" + shot.string() +
                         " file://" + page.string() + " >/dev/null 2>&1");
    CHECK(r.status == 0);
    CHECK(fs::exists(shot));
    MESSAGE("screenshot of the report page: " << shot.string());
  }
}
