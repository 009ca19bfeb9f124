// End-to-end tests of the `bitlab` binary at its limits: a disk that is full
// before or during a run, a sweep and a resumed sweep (exit 4, never "internal error", no folder
// holding only the lock); a chain of base files too deep, a --threads past the cap, a LoCo
// group_size past its rule, a number that overflows, a --set path under an unknown key and an
// unknown subcommand (exit 2, naming what is wrong).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

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

const char* kSmall = R"({
  "name": "limits", "steps": 20, "eval_every": 10, "seed": 3,
  "problem": {"name": "logistic", "dim": 5, "samples": 256},
  "cluster": {"workers": 4, "batch_size": 8},
  "optimizer": {"name": "adam", "lr": 0.05}
})";

// A tmpfs of `kib` KiB at dir/disk that `fill` fills up.
struct SmallDisk : bitlab::testing::TmpfsMount {
  SmallDisk(const TempDir& d, int kib) : TmpfsMount(d.path / "disk", kib) {}
  // Writes zeros to disk/filler until the disk is full.
  void fill(const TempDir& d) const {
    (void)run_shell(d, "dd if=/dev/zero bs=64k of=" + (path / "filler").string());
  }
};

const char* kNoMount =
    "skipped: cannot mount a tmpfs to fill (needs root); the /dev/full case of the cli suite "
    "still runs";

// The message names `what`, and it is not an internal error.
bool says(const Result& r, const std::string& what) {
  return r.err.find(what) != std::string::npos && r.err.find("internal error") == std::string::npos;
}

// The sweep of two runs of kSmall with `steps` steps (its base sweep-exp.json beside it).
std::string small_sweep(const TempDir& d, int steps) {
  Json exp = Json::parse(kSmall);
  exp["steps"] = steps;
  exp["eval_every"] = 0;
  d.file("sweep-exp.json", exp.dump());
  return d.file("sweep.json", R"({"name": "full", "base": "sweep-exp.json",
                                  "grid": {"optimizer.lr": [0.05, 0.01]}, "seeds": [1]})");
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("a full disk: run, sweep and sweep --resume exit 4 naming the file, no bare lock") {
    TempDir d;
    const SmallDisk disk(d, 256);
    if (!disk.mounted) {
      MESSAGE(kNoMount);
      return;
    }
    const std::string exp = d.file("exp.json", kSmall);
    const std::string sweep = small_sweep(d, 20);

    SUBCASE("run: full before it starts: exit 4, and no folder left") {
      disk.fill(d);
      const fs::path out = disk.path / "run";
      const Result r = run_bitlab(d, "run " + exp + " --out " + out.string() + " --quiet");
      CHECK_MESSAGE(r.status == 4, r.err);
      CHECK_MESSAGE(says(r, "No space left on device"), r.err);
      CHECK_MESSAGE(!fs::exists(out), "left behind: " << out);
    }
    SUBCASE("run: fills up while it runs: exit 4, status failed, whole rows") {
      const fs::path out = disk.path / "run";
      // About 150 bytes a metrics row and 50 a comm_log row: 4000 steps need 800 kB.
      const Result r = run_bitlab(
          d, "run " + exp + " --set steps=4000 --set eval_every=0 --out " + out.string());
      CHECK_MESSAGE(r.status == 4, r.err);
      CHECK_MESSAGE(says(r, "No space left on device"), r.err);
      CHECK(r.err.find("status failed") != std::string::npos);
      const std::string metrics = slurp(out / "metrics.csv");
      REQUIRE(!metrics.empty());
      CHECK(metrics.back() == '\n');  // cut back to the last whole step
      if (fs::exists(out / "summary.json")) {
        CHECK(Json::parse(slurp(out / "summary.json"))["status"] == "failed");
      }
    }
    SUBCASE("sweep: full before it starts: exit 4 naming sweep.json") {
      disk.fill(d);
      const Result r =
          run_bitlab(d, "sweep " + sweep + " --quiet --out " + (disk.path / "sw").string());
      CHECK_MESSAGE(r.status == 4, r.err);
      CHECK_MESSAGE(says(r, "sweep.json"), r.err);
      CHECK_MESSAGE(says(r, "No space left on device"), r.err);
      CHECK_MESSAGE(!fs::exists(disk.path / "sw"), "left behind: " << disk.path / "sw");
    }
    SUBCASE("sweep: a run fills the disk: exit 4") {
      const Result r = run_bitlab(d, "sweep " + small_sweep(d, 4000) + " --jobs 1 --quiet --out " +
                                         (disk.path / "sw").string());
      CHECK_MESSAGE(r.status == 4, r.err);
      CHECK_MESSAGE(r.err.find("internal error") == std::string::npos, r.err);
    }
    SUBCASE("sweep --resume: full when it resumes: exit 4") {
      const std::string out = (disk.path / "sw").string();
      REQUIRE(run_bitlab(d, "sweep " + sweep + " --jobs 1 --quiet --out " + out).status == 0);
      // Run 2 as a kill would leave it (no summary): --resume re-runs it.
      for (const auto& e : fs::directory_iterator(out)) {
        if (e.path().filename().string().rfind("run-002", 0) == 0) {
          fs::remove(e.path() / "summary.json");
        }
      }
      disk.fill(d);
      const Result r = run_bitlab(d, "sweep " + sweep + " --resume --jobs 1 --quiet --out " + out);
      CHECK_MESSAGE(r.status == 4, r.err);
      CHECK_MESSAGE(says(r, "No space left on device"), r.err);
    }
  }

  TEST_CASE("a chain of base files: 64 at most, a short message, no crash") {
    TempDir d;
    // f0 -> f1 -> ... -> f{n-1}, the last a whole experiment; long names make
    // a long message if each level adds its own.
    auto chain = [&d](int n) {
      const std::string stem = "chain-" + std::to_string(n) + "-" + std::string(60, 'x') + "-";
      for (int k = 0; k + 1 < n; ++k) {
        d.file(stem + std::to_string(k) + ".json",
               R"({"base": ")" + stem + std::to_string(k + 1) + R"(.json"})");
      }
      d.file(stem + std::to_string(n - 1) + ".json", kSmall);
      return (d.path / (stem + "0.json")).string();
    };
    CHECK(run_bitlab(d, "validate " + chain(64)).status == 0);
    for (int n : {65, 3000}) {
      CAPTURE(n);
      const Result r = run_bitlab(d, "validate " + chain(n));
      CHECK_MESSAGE(r.status == 2, r.err);
      CHECK(r.err.find("a chain of \"base\" files deeper than 64") != std::string::npos);
      CHECK(r.err.size() < 5000);  // kMaxBaseMessageBytes, plus "bitlab: error: "
      CHECK(r.err.find("chain-" + std::to_string(n) + "-") != std::string::npos);
    }
  }

  TEST_CASE("--threads and --jobs past 1024 are refused before anything runs") {
    TempDir d;
    const std::string exp = d.file("exp.json", kSmall);
    for (const char* n : {"4096", "1025", "0", "many"}) {
      CAPTURE(n);
      const Result r = run_bitlab(d, "run " + exp + " --threads " + n + " --quiet");
      CHECK_MESSAGE(r.status == 2, r.err);
      CHECK(r.err.find("--threads") != std::string::npos);
      CHECK(r.err.find("must be an integer from 1 to 1024") != std::string::npos);
    }
    const Result jobs = run_bitlab(d, "sweep " + small_sweep(d, 5) + " --jobs 4096");
    CHECK(jobs.status == 2);
    CHECK(jobs.err.find("must be an integer from 1 to 1024") != std::string::npos);
    const Result ok =
        run_bitlab(d, "run " + exp + " --threads 2 --quiet --out " + (d.path / "ok").string());
    CHECK_MESSAGE(ok.status == 0, ok.err);
  }

  TEST_CASE("a LoCo or n-bit group_size past 2^24 is refused by its rule") {
    TempDir d;
    const std::string exp = d.file("exp.json", kSmall);
    const Result loco = run_bitlab(d, "validate " + exp +
                                          " --set optimizer.name=loco --set "
                                          "optimizer.group_size=1099511627776");
    CHECK_MESSAGE(loco.status == 2, loco.err);
    CHECK(loco.err.find("optimizer.group_size = 1099511627776: must be <= 16777216") !=
          std::string::npos);
    CHECK(loco.err.find("out of memory") == std::string::npos);
    CHECK(run_bitlab(d, "validate " + exp +
                            " --set optimizer.name=loco --set "
                            "optimizer.group_size=4096")
              .status == 0);
  }

  TEST_CASE("a number that overflows names its field; --set a.b.c.d names the whole path") {
    TempDir d;
    const std::string exp =
        d.file("exp.json", R"({"problem": {"name": "logistic"}, "optimizer": {"name": "adam",
                              "lr": 1e400}, "cluster": {"workers": 2}})");
    const Result r = run_bitlab(d, "validate " + exp);
    CHECK(r.status == 2);
    CHECK_MESSAGE(
        r.err.find("exp.json: optimizer.lr: number overflow parsing '1e400'") != std::string::npos,
        r.err);
    // Inside a list: the index too.
    d.file("exp.json", kSmall);
    const std::string sweep =
        d.file("sweep.json", R"({"base": "exp.json", "grid": {"optimizer.lr": [0.1, -1e999]}})");
    const Result s = run_bitlab(d, "sweep " + sweep + " --quiet");
    CHECK(s.status == 2);
    CHECK_MESSAGE(s.err.find("grid.optimizer.lr[1]: number overflow") != std::string::npos, s.err);
    const Result set =
        run_bitlab(d, "validate " + (d.path / "exp.json").string() + " --set a.b.c.d=1");
    CHECK(set.status == 2);
    CHECK_MESSAGE(set.err.find("--set a.b.c.d=1: ") != std::string::npos, set.err);
  }

  TEST_CASE("an unknown subcommand is named, with the subcommands and the closest") {
    TempDir d;
    const Result r = run_bitlab(d, "rnu x.json");
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find("unknown subcommand \"rnu\"") != std::string::npos, r.err);
    CHECK(r.err.find("did you mean \"run\"") != std::string::npos);
    CHECK(r.err.find("\"report\"") != std::string::npos);
    CHECK(run_bitlab(d, "--version").status == 0);
  }
}
