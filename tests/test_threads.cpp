// sim/core/threads.hpp: the OpenMP wait policy is in force in a bitlab
// process (libgomp's own report of it), a sweep divides the cores among its
// jobs unless --threads says otherwise, and `run` warns when asked for more
// threads than the machine has cores (the busy-machine speed itself
// is measured by tests/bench/busy_machine.sh, not here).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "sim/core/threads.hpp"
#include "sim/engine/config.hpp"
#include "tests/cli_fixtures.hpp"

using namespace bitlab;
using namespace bitlab::testing;
namespace fs = std::filesystem;

namespace {

const char* kTiny = R"({
  "name": "threads", "steps": 5, "eval_every": 5, "seed": 1,
  "problem": {"name": "logistic", "dim": 5, "samples": 256},
  "cluster": {"workers": 4, "batch_size": 8},
  "optimizer": {"name": "adam", "lr": 0.05}
})";

// Neither wait-policy variable (nor bitlab's marker) from the test's own
// environment: the run must choose the policy itself.
const std::string kCleanEnv = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u BITLAB_OMP_WAIT_SET";

// The spin count libgomp last reported (OMP_DISPLAY_ENV prints its settings
// when it starts; a re-started process prints them again).
std::string last_spincount(const std::string& err) {
  const std::string key = "GOMP_SPINCOUNT = '";
  const size_t at = err.rfind(key);
  if (at == std::string::npos) return "(none)";
  return err.substr(at + key.size(), err.find('\'', at + key.size()) - at - key.size());
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("threads: libgomp runs bitlab with the passive wait policy; the user's choice wins") {
    TempDir d;
    const auto file = d.file("exp.json", kTiny);
    Result r = run_bitlab(d, "run " + file + " --out " + (d.path / "a").string() + " --quiet",
                          kCleanEnv + " OMP_DISPLAY_ENV=verbose");
    REQUIRE(r.status == 0);
    // Passive: no spinning at all (libgomp's default is 300000).
    CHECK(last_spincount(r.err) == "0");
    const Json manifest = Json::parse(slurp(d.path / "a" / "manifest.json"));
    CHECK(manifest["omp_wait_policy"] == "passive (set by bitlab)");

    // Planted the other way: the user's spin count is kept, and reported.
    r = run_bitlab(d, "run " + file + " --out " + (d.path / "b").string() + " --quiet",
                   kCleanEnv + " GOMP_SPINCOUNT=12345 OMP_DISPLAY_ENV=verbose");
    REQUIRE(r.status == 0);
    CHECK(last_spincount(r.err) == "12345");
    CHECK(Json::parse(slurp(d.path / "b" / "manifest.json"))["omp_wait_policy"] ==
          "GOMP_SPINCOUNT=12345 (set by the user)");

    // BITLAB_NO_REEXEC=1: libgomp's default, and the manifest says so.
    r = run_bitlab(d, "run " + file + " --out " + (d.path / "c").string() + " --quiet",
                   kCleanEnv + " BITLAB_NO_REEXEC=1 OMP_DISPLAY_ENV=verbose");
    REQUIRE(r.status == 0);
    CHECK(last_spincount(r.err) == "300000");
    CHECK(Json::parse(slurp(d.path / "c" / "manifest.json"))["omp_wait_policy"] ==
          "spin (libgomp's default)");
  }

  TEST_CASE("threads: run warns when asked for more threads than cores") {
    TempDir d;
    const auto file = d.file("exp.json", kTiny);
    const int cores = machine_cores();
    Result r = run_bitlab(d, "run " + file + " --out " + (d.path / "a").string() + " --threads " +
                                 std::to_string(cores + 1));
    REQUIRE(r.status == 0);
    CHECK(r.err.find("bitlab: warning: --threads " + std::to_string(cores + 1) +
                     " is more than this machine's " + std::to_string(cores) + " core") !=
          std::string::npos);
    r = run_bitlab(d, "run " + file + " --out " + (d.path / "b").string() + " --threads " +
                          std::to_string(cores));
    REQUIRE(r.status == 0);
    CHECK(r.err.find("more than this machine's") == std::string::npos);
    // The rule itself.
    CHECK(thread_count_warning(0, 2).empty());  // 0: all cores
    CHECK(thread_count_warning(2, 2).empty());
    CHECK(thread_count_warning(3, 2).find("--threads 3 is more than this machine's 2 cores") == 0);
    CHECK(thread_count_warning(2, 1).find("1 core:") != std::string::npos);
  }
}

TEST_SUITE("sweep") {
  TEST_CASE("threads: a sweep divides the cores among its jobs unless --threads is given") {
    CHECK(threads_per_job(2, 0, 2) == 1);
    CHECK(threads_per_job(3, 0, 16) == 5);
    CHECK(threads_per_job(4, 0, 1) == 1);  // never 0
    CHECK(threads_per_job(1, 0, 8) == 8);
    CHECK(threads_per_job(4, 3, 2) == 3);  // the user's count wins
    // A real sweep: each child's manifest records the threads it was given.
    TempDir d;
    d.file("base.json", kTiny);
    const auto file =
        d.file("s.json", R"({"name": "t", "base": "base.json", "seeds": [1, 2]})");
    const int cores = machine_cores();
    int k = 0;
    for (const auto& [flags, want] :
         {std::pair<std::string, int>{"--jobs 2", threads_per_job(2, 0, cores)},
          std::pair<std::string, int>{"--jobs 2 --threads 3", 3}}) {
      CAPTURE(flags);
      const fs::path out = d.path / ("out" + std::to_string(++k));
      Result r = run_bitlab(d, "sweep " + file + " --out " + out.string() + " --quiet " + flags);
      REQUIRE(r.status == 0);
      int runs = 0;
      for (const auto& e : fs::directory_iterator(out)) {
        if (!fs::exists(e.path() / "manifest.json")) continue;
        ++runs;
        CHECK(Json::parse(slurp(e.path() / "manifest.json"))["threads"] == want);
      }
      CHECK(runs == 2);
    }
  }
}
