// `bitlab runs` and `bitlab report`, end to end. The report page is opened in
// a real browser: headless Chromium (Debian's `chromium`) loads report.html
// from disk, the page writes what it rendered into <div id="bitlab-checks">
// (notebooks/report.py), and the test reads it from --dump-dom; a screenshot
// is kept as a test artefact at <build>/test-artefacts/report.png. Without
// Chromium or python3-plotly the browser test says why it skipped. Names,
// option values and labels planted with </script>, <img onerror> and quotes
// must show as text and never run (escaping, and the page's
// Content-Security-Policy); the Python tools' exit statuses follow the CLI's
// (bad input 2, a failed write 4, one line, never a traceback).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "sim/core/human.hpp"
#include "sim/core/schema.hpp"
#include "tests/cli_fixtures.hpp"
#include "tests/tmpfs_mount.hpp"

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

// Headless Chromium with no network (every host name fails to resolve) and a profile in
// d; --virtual-time-budget lets the page's load handler run before the DOM is dumped.
std::string chromium(const TempDir& d) {
  return "/usr/bin/chromium --headless --no-sandbox --disable-gpu --no-first-run "
         "--host-resolver-rules='MAP * ~NOTFOUND' --user-data-dir=" +
         (d.path / "profile").string() + " --virtual-time-budget=5000 ";
}

std::string dump_dom(const TempDir& d, const fs::path& page) {
  const Result r =
      run_shell(d, chromium(d) + "--dump-dom 'file://" + page.string() + "' 2>/dev/null");
  REQUIRE(r.status == 0);
  return r.out;
}

// A screenshot kept next to the binary under test (the build folder): test-artefacts/NAME.
void screenshot(const TempDir& d, const fs::path& page, const std::string& name) {
  const fs::path artefacts = fs::path(BITLAB_BINARY).parent_path() / "test-artefacts";
  fs::create_directories(artefacts);
  const fs::path shot = artefacts / name;
  fs::remove(shot);
  const Result r =
      run_shell(d, chromium(d) + "--window-size=1280,2400 --screenshot=" + shot.string() +
                       " 'file://" + page.string() + "' >/dev/null 2>&1");
  CHECK(r.status == 0);
  CHECK(fs::exists(shot));
  MESSAGE("screenshot of the report page: " << shot.string());
}

// s quoted for /bin/sh.
std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void put_file(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

// The serialised DOM without its attribute values (Chromium writes every value in double
// quotes, a " inside as &quot; but < and > as they are): what is left is elements and text,
// where a planted "<img" would be an element.
std::string without_attribute_values(const std::string& dom) {
  std::string out;
  out.reserve(dom.size());
  for (size_t k = 0; k < dom.size(); ++k) {
    out += dom[k];
    if (dom[k] == '=' && k + 1 < dom.size() && dom[k + 1] == '"') {
      const size_t close = dom.find('"', k + 2);
      if (close == std::string::npos) break;
      out += "\"\"";
      k = close;
    }
  }
  return out;
}

}  // namespace

namespace bitlab::testing {

// A Python tool that stopped as the CLI's commands do: `status`, one line
// "bitlab: error: <what>...", no traceback. Also used by the plot suite (test_plot.cpp).
void check_stopped(const Result& r, int status, const std::string& what) {
  CHECK_MESSAGE(r.status == status, r.err);
  CHECK_MESSAGE(r.err.find("bitlab: error: " + what) != std::string::npos, r.err);
  CHECK_MESSAGE(count(r.err, "bitlab: error: ") == 1, r.err);
  CHECK_MESSAGE(r.err.find("Traceback") == std::string::npos, r.err);
}

}  // namespace bitlab::testing

using bitlab::testing::check_stopped;

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
    // " ms (comm only)": the runs are timed without a compute model.
    for (const char* s : {"adam-a", "adam-b", "onebit", "onebit_adam", "lr=0.01", "completed",
                          "40/40", "logistic", " kB", " ms (comm only)"}) {
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
    // The gap is taken on --metric: eval_loss's final values (summary.json), not train_loss.
    r = run_bitlab(d, "report " + tree.string() + " --baseline adam-a --metric eval_loss --out " +
                          (d.path / "e.html").string());
    REQUIRE(r.status == 0);
    {
      const Json base = Json::parse(slurp(tree / "adam-a" / "summary.json"))["final"];
      const Json one = Json::parse(slurp(tree / "onebit" / "summary.json"))["final"];
      char eval_gap[32], train_gap[32];
      std::snprintf(eval_gap, sizeof eval_gap, ">%+.4g<",
                    one["eval_loss"].get<double>() - base["eval_loss"].get<double>());
      std::snprintf(train_gap, sizeof train_gap, ">%+.4g<",
                    one["train_loss"].get<double>() - base["train_loss"].get<double>());
      const std::string e = slurp(d.path / "e.html");
      CHECK_MESSAGE(e.find(eval_gap) != std::string::npos, eval_gap);
      CHECK_MESSAGE(e.find(train_gap) == std::string::npos, train_gap);
      CHECK(e.find(">eval_loss gap<") != std::string::npos);
      CHECK(html.find(train_gap) != std::string::npos);  // the default metric: train_loss
    }
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
    // Every host name fails to resolve, so a page that fetched plotly.js from the network
    // would show data-plotly="missing" and no traces.
    const std::string dom = dump_dom(d, page);
    CHECK(attribute(dom, "data-errors") == "[]");
    CHECK(attribute(dom, "data-csp") == "[]");  // the policy blocked nothing of the page's own
    CHECK(dom.find("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                   "script-src 'sha256-") != std::string::npos);
    CHECK(attribute(dom, "data-plotly") != "missing");
    CHECK(attribute(dom, "data-rows") == "3");
    const std::string traces = attribute(dom, "data-traces");
    CHECK(traces == attribute(dom, "data-expected-traces"));
    // At least one loss trace per run on each of the three x axes.
    CHECK(std::atoi(traces.c_str()) >= 9);

    screenshot(d, page, "report.png");
  }

  TEST_CASE("bitlab report: planted names, option values and labels show as text, never run") {
    if (!have("/usr/bin/python3 -c 'import plotly'") || access("/usr/bin/chromium", X_OK) != 0) {
      MESSAGE(
          "skipped: needs plotly for /usr/bin/python3 and /usr/bin/chromium (Debian packages "
          "python3-plotly and chromium; ./setup.sh installs them)");
      return;
    }
    TempDir d;
    const fs::path tree = make_tree(d);
    // Each payload sets the page's title to PWNED if it ever runs; the word itself is in
    // no file. Run folders (the first one is three folders deep: x< / script><script>...< /
    // script>), a string option that differs between the runs (problem.data_dir), a final
    // metric's and a phase's name (summary.json), a collective's name (comm_log.csv), the
    // title and the baseline's value.
    const std::string js = "document.title='PW'+'NED'";
    const std::string runs[] = {"x</script><script>" + js + "</script>",
                                "r\"'`<img src=x onerror=" + js + ">",
                                "onebit'><svg onload=" + js + ">"};
    const std::string data_dirs[] = {"</script><img src=x onerror=" + js + ">",
                                     "\"><script>" + js + "</script>", "'`${" + js + "}"};
    const char* made[] = {"adam-a", "adam-b", "onebit"};
    for (int k = 0; k < 3; ++k) {
      const fs::path run = tree / runs[k];
      fs::create_directories(run.parent_path());
      fs::rename(tree / made[k], run);
      Json config = Json::parse(slurp(run / "config.json"));
      config["problem"]["data_dir"] = data_dirs[k];
      put_file(run / "config.json", config.dump());
      Json summary = Json::parse(slurp(run / "summary.json"));
      summary["final"]["m<img src=x onerror=" + js + ">"] = 1.5;
      summary["warnings"] =
          Json::array({"w" + std::to_string(k) + "</script><script>" + js + "</script>"});
      summary["phases"]["p</script><script>" + js + "</script>"] =
          Json{{"steps", 1}, {"bytes_sent_per_worker", 2}, {"comm_s", 0.1}};
      put_file(run / "summary.json", summary.dump());
      std::string comm = slurp(run / "comm_log.csv");
      comm.replace(comm.find("allreduce"), 9, "<img src=x onerror=" + js + ">");
      put_file(run / "comm_log.csv", comm);
    }
    const std::string title = "T</title><script>" + js + "</script>\"'`";
    const fs::path page = d.path / "planted.html";
    Result r = run_bitlab(d, "report " + tree.string() + " --out " + page.string() + " --title " +
                                 quote(title) + " --baseline " +
                                 quote("problem.data_dir=" + data_dirs[1]));
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string html = slurp(page);
    for (const char* raw : {"<script>document", "<img src=x", "<svg onload", "</script><img"}) {
      CHECK_MESSAGE(html.find(raw) == std::string::npos, raw);
    }

    const std::string dom = dump_dom(d, page);
    CHECK(dom.find("PWNED") == std::string::npos);
    CHECK(attribute(dom, "data-errors") == "[]");
    CHECK(attribute(dom, "data-csp") == "[]");
    CHECK(attribute(dom, "data-rows") == "3");
    CHECK(attribute(dom, "data-traces") == attribute(dom, "data-expected-traces"));
    CHECK(std::atoi(attribute(dom, "data-traces").c_str()) >= 9);
    // The page's elements are its own: no <img> or <svg onload> (the run folders are in
    // title attributes: attribute values are left out of the search), and only its two
    // scripts besides plotly.js's packed data block and the figures' JSON data blocks (the
    // unpacked plotly.js is run and taken out again).
    const std::string elements = without_attribute_values(dom);
    CHECK(elements.find("<img") == std::string::npos);
    CHECK(elements.find("<svg onload") == std::string::npos);
    CHECK(count(dom, "<script>") == 2);
    CHECK(count(dom, "<script type=\"application/octet-stream\" id=\"bitlab-plotly\">") == 1);
    CHECK(count(dom, "<script") ==
          3 + count(dom, "<script type=\"application/json\" class=\"bitlab-figure\""));
    // What was planted is shown as text: the title, the table's cells, the curves' legends.
    CHECK(
        dom.find("<title>T&lt;/title&gt;&lt;script&gt;document.title='PW'+'NED'&lt;/script&gt;\"'`"
                 "</title>") != std::string::npos);
    // Run folders: on hover (title), the labels made of the swept values shown. Chromium
    // writes < and > in attribute values as they are (older) or as &lt; &gt; (newer).
    auto in_attribute = [&](const std::string& before, std::string value) {
      if (dom.find(before + value + "\"") != std::string::npos) return true;
      for (const auto& [raw, ref] :
           {std::pair<std::string, std::string>{"<", "&lt;"}, {">", "&gt;"}}) {
        for (size_t at = value.find(raw); at != std::string::npos; at = value.find(raw, at + 1)) {
          value.replace(at, 1, ref);
        }
      }
      return dom.find(before + value + "\"") != std::string::npos;
    };
    CHECK(in_attribute(" title=\"", "x</script><script>document.title='PW'+'NED'</script>"));
    CHECK(in_attribute("<tr class=\"baseline\"><td class=\"label\" title=\"",
                       "r&quot;'`<img src=x onerror=document.title='PW'+'NED'>"));
    // The runs' warnings, at the top of the page, as text.
    CHECK(dom.find("<li>w1&lt;/script&gt;&lt;script&gt;document.title='PW'+'NED'&lt;/script&gt; "
                   "<span class=\"note\">") != std::string::npos);
    CHECK(dom.find("id=\"warnings\"") < dom.find("id=\"settings\""));
    // The swept data_dir as text, cut short where labels are: two table cells and the three
    // loss figures' legends at least.
    CHECK(count(dom, "data_dir=&lt;/script&gt;&lt;img s") >= 5);
    CHECK(dom.find(">m&lt;img src=x onerror=document.title='PW'+'NED'&gt;</th>") !=
          std::string::npos);
    screenshot(d, page, "report-planted.png");

    // The policy holds from disk: a script and an onerror= slipped into the page do not run,
    // and the page says what was blocked.
    std::string injected = html;
    injected.insert(injected.rfind("</body>"),
                    "<script>" + js + "</script><img src=x onerror=\"" + js + "\">");
    put_file(d.path / "injected.html", injected);
    const std::string blocked = dump_dom(d, d.path / "injected.html");
    CHECK(blocked.find("PWNED") == std::string::npos);
    CHECK(attribute(blocked, "data-csp").find("script-src-elem") != std::string::npos);
    CHECK(attribute(blocked, "data-csp").find("script-src-attr") != std::string::npos);
    CHECK(attribute(blocked, "data-rows") == "3");
  }

  TEST_CASE(
      "bitlab report: a 50-run sweep under 2 MB, its gap columns on screen at 1400 and 1000 px") {
    if (!have("/usr/bin/python3 -c 'import plotly'") || access("/usr/bin/chromium", X_OK) != 0) {
      MESSAGE(
          "skipped: needs plotly for /usr/bin/python3 and /usr/bin/chromium (Debian packages "
          "python3-plotly and chromium; ./setup.sh installs them)");
      return;
    }
    // 5 optimizers x 5 learning rates x 2 seeds of 1000 steps: drawn whole, the curves alone
    // would weigh about 6 MB, plotly.js packed whole 2.5 MB.
    TempDir d;
    d.file("base.json", R"({
      "name": "wide", "steps": 1000, "eval_every": 20,
      "problem": {"name": "logistic", "dim": 8, "samples": 512},
      "cluster": {"workers": 4, "batch_size": 8},
      "optimizer": {"name": "adam", "lr": 0.01},
      "network": {"preset": "ethernet_10g_a100x8"}
    })");
    const std::string sweep = d.file("sweep.json", R"({
      "name": "wide", "base": "base.json",
      "grid": {"optimizer.lr": [0.005, 0.01, 0.02, 0.04, 0.08],
               "optimizer.name": ["adam", "onebit_adam", "zero_one_adam", "apmsqueeze",
                                  "onebit_lamb"]},
      "seeds": [1, 2]
    })");
    const fs::path out = d.path / "wide";
    Result r = run_bitlab(d, "sweep " + sweep + " --quiet --jobs 2 --out " + out.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    // Labels as long as a person may write: each setting's description (one per setting,
    // so they become the labels) 300 characters long; and a warning in one run.
    int runs = 0;
    for (const auto& e : fs::directory_iterator(out)) {
      if (!fs::exists(e.path() / "summary.json")) continue;
      ++runs;
      Json config = Json::parse(slurp(e.path() / "config.json"));
      config["description"] = std::string(300, 'w') + " " +
                              config["optimizer"]["name"].get<std::string>() + " " +
                              config["optimizer"]["lr"].dump();
      put_file(e.path() / "config.json", config.dump());
      if (runs == 1) {
        Json summary = Json::parse(slurp(e.path() / "summary.json"));
        summary["warnings"].push_back("a planted warning");
        put_file(e.path() / "summary.json", summary.dump());
      }
    }
    REQUIRE(runs == 50);
    // sweep.csv's warnings column (messages joined by " | "), as `bitlab sweep` writes it: a
    // column added at the end, the first run's row with two messages.
    {
      std::istringstream csv(slurp(out / "sweep.csv"));
      std::string line, text;
      for (int k = 0; std::getline(csv, line); ++k) {
        text += line +
                (k == 0   ? ",warnings"
                 : k == 1 ? ",from sweep.csv | a second one"
                          : ",") +
                "\n";
      }
      put_file(out / "sweep.csv", text);
    }
    r = run_bitlab(d, "report " + out.string() + " --baseline optimizer.name=adam");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const fs::path page = out / "report.html";
    const std::string html = slurp(page);
    MESSAGE("report.html of 50 runs: " << html.size() << " bytes");
    CHECK(html.size() < 2000000);
    CHECK(html.find("each run&#x27;s metrics.csv holds every step exactly") != std::string::npos);

    // One colour per setting: the first figure (train_loss against step) has 25 named traces,
    // each with its own colour and a band (two unnamed traces, the upper filled down to the
    // lower), 300 of its 1000 points, the last step (1000) kept.
    const std::string open = "data-div=\"bitlab-figure-0\">";
    const size_t at = html.find(open) + open.size();
    const Json fig = Json::parse(html.substr(at, html.find("</script>", at) - at));
    std::set<std::string> colours;
    int bands = 0;
    for (const auto& t : fig["data"]) {
      if (t.contains("name")) {
        colours.insert(t["line"]["color"].get<std::string>());
        CHECK(t["x"].size() == 300);  // 1000 steps down-sampled
        CHECK(t["x"].back() == 1000);
      } else if (t.value("fill", "") == "tonexty") {
        ++bands;
      }
    }
    CHECK(colours.size() == 25);
    CHECK(bands == 25);

    // The speed-up and gap columns of both tables lie inside the window, at both widths.
    for (int width : {1400, 1000}) {
      const std::string size = " --window-size=" + std::to_string(width) + ",900 ";
      r = run_shell(d,
                    chromium(d) + size + "--dump-dom 'file://" + page.string() + "' 2>/dev/null");
      REQUIRE(r.status == 0);
      const std::string dom = r.out;
      INFO("width " << width);
      CHECK(attribute(dom, "data-errors") == "[]");
      CHECK(attribute(dom, "data-csp") == "[]");
      CHECK(attribute(dom, "data-rows") == "50");
      CHECK(attribute(dom, "data-traces") == attribute(dom, "data-expected-traces"));
      CHECK(std::atoi(attribute(dom, "data-width").c_str()) > width - 30);  // less a scrollbar
      CHECK(attribute(dom, "data-offscreen") == "[]");
      CHECK(dom.find("a planted warning") < dom.find("id=\"settings\""));
      CHECK(dom.find("<li>from sweep.csv <span") < dom.find("id=\"settings\""));
      CHECK(dom.find("<li>a second one <span") < dom.find("id=\"settings\""));
      const fs::path artefacts = fs::path(BITLAB_BINARY).parent_path() / "test-artefacts";
      fs::create_directories(artefacts);
      const fs::path shot = artefacts / ("report-50-runs-" + std::to_string(width) + ".png");
      run_shell(d, chromium(d) + " --window-size=" + std::to_string(width) + ",2400 --screenshot=" +
                       shot.string() + " 'file://" + page.string() + "' >/dev/null 2>&1");
      CHECK(fs::exists(shot));
      MESSAGE("screenshot: " << shot.string());
    }
  }

  TEST_CASE("a sweep in the user's words: values as written, grouped warnings, comm-only") {
    if (!have("/usr/bin/python3 -c 'import plotly'")) {
      MESSAGE("skipped: plotly is not importable by /usr/bin/python3 (python3-plotly)");
      return;
    }
    // 1-bit Adam with a warm-up of 15 % or 40 % of 40 steps, timed without compute; each
    // run also gets a warning whose number differs ("... 100 ..." and "... 150 ...").
    TempDir d;
    const std::string sweep = d.file("s.json", R"({"name": "pct",
      "base": {"steps": 40, "problem": {"name": "logistic", "dim": 5, "samples": 256},
        "cluster": {"workers": 4, "batch_size": 8},
        "optimizer": {"name": "onebit_adam", "lr": 0.05, "bias_correction": false},
        "network": {"preset": "ethernet_10g_a100x8"}},
      "grid": {"optimizer.freeze_step": ["15%", "40%"], "optimizer.bias_correction": [false, true]}})");
    const fs::path out = d.path / "pct";
    Result r = run_bitlab(d, "sweep " + sweep + " --quiet --jobs 2 --out " + out.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    int k = 0;
    for (const auto& e : fs::directory_iterator(out)) {
      if (!fs::exists(e.path() / "summary.json")) continue;
      Json summary = Json::parse(slurp(e.path() / "summary.json"));
      summary["warnings"].push_back("a planted warning of run " + std::to_string(100 + 50 * k++) +
                                    " steps");
      put_file(e.path() / "summary.json", summary.dump());
    }
    REQUIRE(k == 4);
    // Several PATH=VALUE pairs select the baseline: all must match (a value as written too).
    r = run_bitlab(d, "report " + out.string() +
                          " --baseline optimizer.freeze_step=15%,bias_correction=true");
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const fs::path page = out / "report.html";
    const std::string html = slurp(page);
    CHECK(count(html, "<tr class='baseline'>") == 2);  // its setting and its one run
    CHECK(html.find("Baseline (highlighted): bias_correction=true, fr") != std::string::npos);
    CHECK(html.find("title='bias_correction=true, freeze_step=15% (step 6)'") !=
          std::string::npos);
    // The columns say what they measure: no compute model, so communication only.
    CHECK(html.find(">comm-only speed-up<") != std::string::npos);
    CHECK(html.find(">simulated time (comm only)<") != std::string::npos);
    CHECK(html.find(">speed-up<") == std::string::npos);
    // One warning of one kind, its differing number as a range, all four runs.
    CHECK_MESSAGE(html.find("<li>a planted warning of run 100\u2013250 steps <span class='note'>"
                            "(all 4 runs)</span></li>") != std::string::npos,
                  html.substr(html.find("id='warnings'"), 600));
    // 1-bit Adam on this tiny problem: more messages than its twin, and latency decides;
    // said once for the four runs, their times as a range.
    const std::string warned = html.substr(html.find("id='warnings'"),
                                           html.find("<h2>Settings") - html.find("id='warnings'"));
    CHECK(count(warned, "exceeds the uncompressed twin") == 1);
    CHECK(warned.find("onebit_adam with compression none priced on the same network") !=
          std::string::npos);
    // Two pairs of which one matches no run: bad input, naming both.
    r = run_bitlab(d, "report " + out.string() + " --out " + (d.path / "x.html").string() +
                          " --baseline optimizer.freeze_step=15% --baseline seed=99");
    check_stopped(r, 2, "--baseline optimizer.freeze_step=15%,seed=99: matches none");
    if (access("/usr/bin/chromium", X_OK) == 0) {
      const std::string dom = dump_dom(d, page);
      CHECK(attribute(dom, "data-errors") == "[]");
      CHECK(attribute(dom, "data-rows") == "4");
      screenshot(d, page, "report-values-as-written.png");
    }
  }

  TEST_CASE("report.py's escaping: random strings stay in their context (hypothesis)") {
    if (!have("/usr/bin/python3 -c 'import hypothesis, plotly'")) {
      MESSAGE(
          "skipped: needs hypothesis and plotly for /usr/bin/python3 (Debian packages "
          "python3-hypothesis, python3-plotly)");
      return;
    }
    TempDir d;
    const Result r = run_shell(d, std::string("cd ") + d.path.string() + " && /usr/bin/python3 " +
                                      BITLAB_SOURCE_DIR + "/notebooks/test_report_escaping.py");
    CHECK_MESSAGE(r.status == 0, r.err);
  }

  TEST_CASE("report.py's down-sampling and label shortening (hypothesis)") {
    if (!have("/usr/bin/python3 -c 'import hypothesis, plotly'")) {
      MESSAGE(
          "skipped: needs hypothesis and plotly for /usr/bin/python3 (Debian packages "
          "python3-hypothesis, python3-plotly)");
      return;
    }
    TempDir d;
    const Result r = run_shell(d, std::string("cd ") + d.path.string() + " && /usr/bin/python3 " +
                                      BITLAB_SOURCE_DIR + "/notebooks/test_report_curves.py");
    CHECK_MESSAGE(r.status == 0, r.err);
  }

  TEST_CASE("plot, runs and report read any damaged folder: exit 0 or 2, never 1 (hypothesis)") {
    if (!have("/usr/bin/python3 -c 'import hypothesis'")) {
      MESSAGE("skipped: needs hypothesis for /usr/bin/python3 (Debian package python3-hypothesis)");
      return;
    }
    TempDir d;
    // notebooks/test_input_fuzz.py: 100 damaged folders for runs, 33 for report, 16 for plot
    // (about a minute); BITLAB_FUZZ_EXAMPLES raises it for a longer search.
    const Result r = run_shell(
        d, std::string("cd ") + d.path.string() +
               " && BITLAB_FUZZ_EXAMPLES=100 BITLAB_BINARY=" + BITLAB_BINARY +
               " /usr/bin/python3 " + BITLAB_SOURCE_DIR + "/notebooks/test_input_fuzz.py");
    CHECK_MESSAGE(r.status == 0, r.err);
  }

  TEST_CASE("runs and report: bad input exits 2 naming the file, a failed write 4, no traceback") {
    TempDir d;
    const fs::path tree = make_tree(d);
    const fs::path run = tree / "adam-a";
    const std::string dir = " " + tree.string();
    const bool plotly = have("/usr/bin/python3 -c 'import plotly'");
    auto both = [&](int status, const std::string& what) {
      check_stopped(run_bitlab(d, "runs" + dir), status, what);
      check_stopped(run_bitlab(d, "report" + dir + " --out " + (d.path / "r.html").string()),
                    status, what);
      CHECK(!fs::exists(d.path / "r.html"));
    };
    // Files that are not what a run writes.
    const std::string summary = slurp(run / "summary.json");
    put_file(run / "summary.json", "[1, 2]");
    both(2, (run / "summary.json").string() + ": holds a JSON array, not an object");
    put_file(run / "summary.json", R"({"status": "completed", "final": {"train_loss": "low"}})");
    both(2, (run / "summary.json").string() + ": final.train_loss = \"low\": must be a number");
    put_file(run / "summary.json", R"({"totals": [1]})");
    both(2, (run / "summary.json").string() + ": totals = [1]: must be a JSON object");
    put_file(run / "summary.json", R"({"status": "comp)");
    both(2, (run / "summary.json").string() + ": not valid JSON");
    put_file(run / "summary.json", summary);
    const std::string metrics = slurp(run / "metrics.csv");
    put_file(run / "metrics.csv", "step,train_loss\n1,\xff\xfe\n");
    both(2, (run / "metrics.csv").string() + ": not UTF-8 text (byte 0xff at offset 18)");
    put_file(run / "metrics.csv", metrics);
    const std::string config = slurp(run / "config.json");
    put_file(run / "config.json", "{\"name\": \"\xe9\"}");
    both(2, (run / "config.json").string() + ": not UTF-8 text");
    put_file(run / "config.json", config);
    put_file(tree / "sweep.csv", "run,dir\n0,\xff\n");
    both(2, (tree / "sweep.csv").string() + ": not UTF-8 text");
    fs::remove(tree / "sweep.csv");
    // Standard output full (in a subshell: run_shell sends the command's stdout to a file).
    check_stopped(
        run_shell(d, "(" + std::string(BITLAB_BINARY) + " runs --json" + dir + " >/dev/full)"), 4,
        "cannot write standard output: No space left on device");

    if (!plotly) {
      MESSAGE("skipped the report's write checks: plotly is not importable by /usr/bin/python3");
      return;
    }
    const std::string comm = slurp(run / "comm_log.csv");
    // A binary comm_log.csv (only the report reads it).
    put_file(run / "comm_log.csv", std::string("\x7f"
                                               "ELF\x02\x01\x01\0\0\0",
                                               10));
    check_stopped(run_bitlab(d, "report" + dir + " --out " + (d.path / "r.html").string()), 2,
                  (run / "comm_log.csv").string() + ": a NUL byte at offset 7: not a text file");
    put_file(run / "comm_log.csv", comm);
    // --out: a folder is bad input; a write the system refuses is exit 4 and leaves nothing.
    fs::create_directories(d.path / "folder");
    check_stopped(run_bitlab(d, "report" + dir + " --out " + (d.path / "folder").string()), 2,
                  "--out " + (d.path / "folder").string() + ": is a folder");
    check_stopped(run_bitlab(d, "report" + dir + " --out /proc/x"), 4,
                  "cannot write /proc/x: No such file or directory");
    // A file size limit stands in for a full disk (Python ignores SIGXFSZ: the write fails).
    check_stopped(run_shell(d, "ulimit -f 1000; " + std::string(BITLAB_BINARY) + " report" + dir +
                                   " --out " + (d.path / "big.html").string()),
                  4, "cannot write " + (d.path / "big.html").string() + ": File too large");
    for (const auto& e : fs::directory_iterator(d.path)) {
      CHECK_MESSAGE(e.path().filename().string().rfind("big.html", 0) != 0, e.path());
    }
    if (geteuid() != 0) {
      fs::create_directories(d.path / "ro");
      fs::permissions(d.path / "ro", fs::perms::owner_read | fs::perms::owner_exec);
      check_stopped(run_bitlab(d, "report" + dir + " --out " + (d.path / "ro" / "r.html").string()),
                    4,
                    "cannot write " + (d.path / "ro" / "r.html").string() + ": Permission denied");
      fs::permissions(d.path / "ro", fs::perms::owner_all);
    } else if (const bitlab::testing::TmpfsMount ro(d.path / "ro", 64, true); ro.mounted) {
      // Root writes into a folder whatever its permissions, not into a
      // read-only file system.
      check_stopped(
          run_bitlab(d, "report" + dir + " --out " + (d.path / "ro" / "r.html").string()), 4,
          "cannot write " + (d.path / "ro" / "r.html").string() + ": Read-only file system");
    } else {
      MESSAGE(
          "the read-only folder check is skipped: permissions do not stop root, and a "
          "read-only tmpfs could not be mounted; /proc stands in");
    }
  }
}

// `bitlab runs` shows each run's warnings (summary.json's "warnings"): a count in
// the table with the text under it, one csv cell joined by " | ", a JSON list; a
// summary whose warnings are not a list of strings is bad input.
TEST_SUITE("report") {
  TEST_CASE("bitlab runs: each run's warnings, counted in the table and written out") {
    TempDir d;
    const fs::path tree = d.path / "tree";
    // onebit_adam with its warm-up as long as the run warns; adam does not.
    const auto exp = d.file("e.json", R"({"name": "e", "steps": 10,
      "problem": {"name": "quadratic", "dim": 4}, "cluster": {"workers": 2},
      "optimizer": {"name": "onebit_adam", "lr": 0.01, "freeze_step": 10}})");
    REQUIRE(run_bitlab(d, "run " + exp + " --quiet --out " + (tree / "warned").string()).status ==
            0);
    // (A --set switching the optimizer would warn of the dropped freeze_step.)
    const auto plain = d.file("p.json", R"({"name": "p", "steps": 10,
      "problem": {"name": "quadratic", "dim": 4}, "cluster": {"workers": 2},
      "optimizer": {"name": "adam", "lr": 0.01}})");
    REQUIRE(run_bitlab(d, "run " + plain + " --quiet --out " + (tree / "plain").string()).status ==
            0);
    const Json warnings = Json::parse(slurp(tree / "warned" / "summary.json"))["warnings"];
    REQUIRE(warnings.size() >= 1);
    const std::string first = warnings[0].get<std::string>();
    CHECK(Json::parse(slurp(tree / "plain" / "summary.json"))["warnings"].empty());

    Result r = run_bitlab(d, "runs " + tree.string());
    REQUIRE_MESSAGE(r.status == 0, r.err);
    const std::string table = r.out.substr(0, r.out.find("\nwarnings:\n"));
    CHECK(table.find("warnings") != std::string::npos);  // the column's header
    CHECK(table.find(std::to_string(warnings.size()) + " (below)") != std::string::npos);
    CHECK(r.out.find("\nwarnings:\n  warned: " + first + "\n") != std::string::npos);
    CHECK(r.out.find("  plain: ") == std::string::npos);

    r = run_bitlab(d, "runs " + tree.string() + " --json");
    REQUIRE(r.status == 0);
    for (const auto& run : Json::parse(r.out)) {
      CHECK(run["warnings"] == (run["run"] == "warned" ? warnings : Json::array()));
    }
    r = run_bitlab(d, "runs " + tree.string() + " --csv");
    REQUIRE(r.status == 0);
    CHECK(r.out.substr(0, r.out.find('\n')).find(",path,warnings") != std::string::npos);
    // The rows end with the cell, quoted only when it holds a comma or a quote.
    std::string joined;
    for (const auto& w : warnings) joined += (joined.empty() ? "" : " | ") + w.get<std::string>();
    const bool quoted = joined.find_first_of(",\"") != std::string::npos;
    CHECK(r.out.find(quoted ? "\"" + joined + "\"\n" : "," + joined + "\n") != std::string::npos);

    // Bad input: warnings of the wrong type name the file and the field, exit 2.
    Json s = Json::parse(slurp(tree / "warned" / "summary.json"));
    s["warnings"] = "not a list";
    d.file("tree/warned/summary.json", s.dump());
    r = run_bitlab(d, "runs " + tree.string());
    CHECK(r.status == 2);
    CHECK(r.err.find("summary.json: warnings = \"not a list\": must be a list of strings") !=
          std::string::npos);
  }
}
