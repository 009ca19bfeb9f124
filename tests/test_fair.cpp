// Fair answers by default (docs/experiments.md "Config that follows the
// question", "Honest outcomes", "A twin baseline"; docs/sweeps.md "Comparing
// optimizers"; docs/time-model.md): optimizer switching, --unset, base chains,
// warm-up shares, divergence thresholds, warnings, the twin baseline, cost of
// an experiment file, recost of a sweep folder. Through the real binary.
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "sim/core/schema.hpp"
#include "tests/cli_fixtures.hpp"

namespace fs = std::filesystem;
using bitlab::Json;
using bitlab::testing::Result;
using bitlab::testing::run_bitlab;
using bitlab::testing::slurp;
using bitlab::testing::TempDir;

namespace {

// The newcomer's comparison: 1-bit Adam with a 100-step warm-up on the MLP.
constexpr const char* kOneBit = R"({"name": "cmp", "steps": 160, "eval_every": 0,
  "problem": {"name": "mlp"}, "cluster": {"workers": 16, "batch_size": 16},
  "optimizer": {"name": "onebit_adam", "lr": 0.001, "freeze_step": 100}})";

Json summary_of(const fs::path& dir) {
  return Json::parse(slurp(dir / "summary.json"));
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("fair") {
  TEST_CASE("--set optimizer.name switches optimizer, keeping the shared options") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    const auto out = d.path / "adam";
    Result r = run_bitlab(d, "run " + file + " --set optimizer.name=adam --out " + out.string());
    REQUIRE(r.status == 0);
    CHECK(has(r.err, "adam does not know onebit_adam's freeze_step (dropped"));
    const Json config = Json::parse(slurp(out / "config.json"));
    CHECK(config["optimizer"]["name"] == "adam");
    CHECK(config["optimizer"]["lr"] == 0.001);
    CHECK_FALSE(config["optimizer"].contains("freeze_step"));
    CHECK(summary_of(out)["warnings"].size() == 1);
    // validate does the same; an option the new optimizer lacks after the
    // switch is still an error.
    r = run_bitlab(d, "validate " + file + " --set optimizer.name=adam");
    CHECK(r.status == 0);
    r = run_bitlab(d,
                   "validate " + file + " --set optimizer.name=adam --set optimizer.freeze_step=3");
    CHECK(r.status == 2);
    CHECK(has(r.err, "freeze_step"));
  }

  TEST_CASE("--unset brings a default back; unsetting what is not set is refused") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    Result r = run_bitlab(d, "validate " + file + " --unset optimizer.freeze_step --print");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["optimizer"]["freeze_step"] == 100);  // the default
    r = run_bitlab(d, "validate " + file + " --unset optimizer.lr --print");
    CHECK(Json::parse(r.out)["optimizer"]["lr"] == 0.001);  // 1-bit Adam's default lr
    r = run_bitlab(d, "validate " + file + " --unset optimizer.nothing");
    CHECK(r.status == 2);
    CHECK(has(r.err, "--unset optimizer.nothing: not set"));
  }

  TEST_CASE("base: inheritance with relative paths, overrides, null removes, cycles refused") {
    TempDir d;
    d.file("sub/base.json", kOneBit);
    const auto child = d.file("child.json", R"({"base": "sub/base.json", "steps": 20,
      "optimizer": {"freeze_step": null, "lr": 0.002}})");
    Result r = run_bitlab(d, "validate " + child + " --print");
    REQUIRE(r.status == 0);
    const Json resolved = Json::parse(r.out);
    CHECK(resolved["steps"] == 20);
    CHECK(resolved["optimizer"]["lr"] == 0.002);
    CHECK(resolved["optimizer"]["freeze_step"] == 100);  // removed: the default
    CHECK(resolved["cluster"]["workers"] == 16);         // from the base
    // A child switching optimizer drops the base's foreign options.
    const auto adam = d.file("adam.json", R"({"base": "sub/base.json",
      "optimizer": {"name": "adam"}})");
    r = run_bitlab(d, "validate " + adam);
    CHECK(r.status == 0);
    CHECK(has(r.err, "adam does not know onebit_adam's freeze_step"));
    d.file("x.json", R"({"base": "y.json", "steps": 3})");
    const auto y = d.file("y.json", R"({"base": "x.json"})");
    r = run_bitlab(d, "validate " + y);
    CHECK(r.status == 2);
    CHECK(has(r.err, "makes a cycle"));
    const auto missing = d.file("m.json", R"({"base": "nope.json"})");
    r = run_bitlab(d, "validate " + missing);
    CHECK(r.status == 2);
    CHECK(has(r.err, "nope.json: no such file"));
  }

  TEST_CASE("a warm-up given as a share of the run") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    Result r = run_bitlab(d, "validate " + file + " --set optimizer.freeze_step=15% --print");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["optimizer"]["freeze_step"] == 24);  // round(0.15 · 160)
    for (const char* bad : {"abc%", "150%", "-1%"}) {
      r = run_bitlab(d, "validate " + file + " --set optimizer.freeze_step=" + bad);
      CHECK(r.status == 2);
      CHECK(has(r.err, "a share of the run must be a number from 0 to 100"));
    }
  }

  TEST_CASE("blow-ups are diverged; suspicious settings warn and are kept in the summary") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    // No warm-up: the loss grows by orders of magnitude within a few steps.
    const auto no_warmup = d.path / "no-warmup";
    Result r =
        run_bitlab(d, "run " + file + " --set optimizer.freeze_step=0 --out " + no_warmup.string());
    CHECK(r.status == 3);
    CHECK(has(r.err, "no warm-up"));
    Json s = summary_of(no_warmup);
    CHECK(s["status"] == "diverged");
    CHECK(has(s["divergence"]["what"].get<std::string>(), "exceeds diverge_loss_factor 100"));
    CHECK(has(s["warnings"][0].get<std::string>(), "freeze_step = 0"));
    // The same with the loss test off runs on: the threshold is what caught it.
    const auto off = d.path / "off";
    r = run_bitlab(d, "run " + file + " --set optimizer.freeze_step=0 --set steps=3" +
                          " --set diverge_loss_factor=0 --set diverge_grad_norm_factor=0 --out " +
                          off.string());
    CHECK(r.status == 0);
    // A warm-up as long as the run.
    const auto never = d.path / "never";
    r = run_bitlab(d, "run " + file + " --set optimizer.freeze_step=5000 --set steps=5 --out " +
                          never.string());
    CHECK(r.status == 0);
    CHECK(has(summary_of(never)["warnings"][0].get<std::string>(), "never compresses"));
    // 0/1 Adam with the default local_step_scaler never takes a local step.
    const auto zo = d.path / "zo";
    r = run_bitlab(d, "run " + file + " --set optimizer.name=zero_one_adam --set steps=30" +
                          " --set optimizer.var_freeze_step=10 --out " + zo.string());
    CHECK(has(r.err, "no local step starts within the run"));
  }

  TEST_CASE("the twin baseline reports the true gap; an optimizer without a twin is refused") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    const auto out = d.path / "run";
    Result r = run_bitlab(d, "run " + file + " --baseline-twin --set network.preset=" +
                                 "ethernet_10g_a100x8 --out " + out.string());
    REQUIRE(r.status == 0);
    CHECK(r.out == out.string() + "\n");  // the twin prints no folder of its own
    CHECK(has(r.err, "vs its twin (uncompressed onebit_adam, in twin/): train_loss "));
    const Json s = summary_of(out);
    const Json twin = summary_of(out / "twin");
    const Json tc = Json::parse(slurp(out / "twin" / "config.json"));
    CHECK(tc["optimizer"]["compression"] == "none");
    CHECK(tc["optimizer"]["freeze_step"] == 100);
    CHECK(tc["optimizer"]["bias_correction"] == false);  // shared, not Adam's default
    CHECK(s["baseline"]["kind"] == "twin");
    const double gap =
        s["final"]["train_loss"].get<double>() - twin["final"]["train_loss"].get<double>();
    CHECK(s["baseline"]["gap"]["train_loss"].get<double>() == doctest::Approx(gap));
    // 100 of 160 steps exchange the same fp32 gradient; the last 60 send ~1/32.
    CHECK(s["baseline"]["bytes_ratio"].get<double>() < 0.7);
    // At d = 676 the four 1-bit collectives' latencies outweigh the bytes saved
    // (a slow-down, reported as it is): the ratio is the twin's time over this run's.
    CHECK(s["baseline"]["speedup"].get<double>() ==
          doctest::Approx(twin["time"]["sim_time_s"].get<double>() /
                          s["time"]["sim_time_s"].get<double>()));
    // The warm-up is the twin's: identical rows (but for wall_s) up to the
    // switch after step 100; the compressed steps differ.
    const auto rows = [](const fs::path& csv, int from, int to) {
      std::istringstream in(slurp(csv));
      std::string line, kept;
      for (int k = 0; std::getline(in, line); ++k) {
        if (k >= from && k <= to) kept += line.substr(0, line.rfind(',')) + "\n";
      }
      return kept;
    };
    CHECK(rows(out / "metrics.csv", 0, 100) == rows(out / "twin" / "metrics.csv", 0, 100));
    CHECK(rows(out / "metrics.csv", 101, 160) != rows(out / "twin" / "metrics.csv", 101, 160));
    r = run_bitlab(d, "validate " + file + " --set optimizer.name=binsgdm --set baseline=twin");
    CHECK(r.status == 2);
    CHECK(has(r.err, "baseline = \"twin\": binsgdm has no uncompressed twin"));
    r = run_bitlab(d, "validate " + file + " --set optimizer.name=adam --set baseline=twin");
    CHECK(r.status == 2);
    CHECK(has(r.err, "adam does not compress"));
  }

  TEST_CASE("a sweep comparing optimizers warns of differing shared hyperparameters") {
    TempDir d;
    d.file("a.json", kOneBit);
    const auto sweep = d.file("s.json", R"({"name": "cmp", "base": "a.json",
      "zip": {"optimizer.name": ["adam", "onebit_adam"], "optimizer.freeze_step": [null, 100]}})");
    const auto out = d.path / "sweep";
    Result r = run_bitlab(d, "sweep " + sweep + " --jobs 2 --out " + out.string());
    REQUIRE(r.status == 0);
    CHECK(has(r.err,
              "optimizer.bias_correction differs between the optimizers compared (adam "
              "true, onebit_adam false)"));
    const Json sj = Json::parse(slurp(out / "sweep.json"));
    CHECK(sj["warnings"].size() >= 1);
    CHECK(fs::exists(out / "run-001_optimizer.name=adam_optimizer.freeze_step=null"));
    // Whole optimizer objects are named by what differs.
    const auto objects = d.file("o.json", R"({"name": "obj", "base": "a.json", "zip":
      {"optimizer": [{"name": "adam", "lr": 0.001, "bias_correction": false},
                     {"name": "onebit_adam", "lr": 0.001, "freeze_step": 100}]}})");
    const auto out2 = d.path / "sweep2";
    r = run_bitlab(d, "sweep " + objects + " --jobs 2 --out " + out2.string());
    REQUIRE(r.status == 0);
    CHECK(fs::exists(out2 / "run-002_optimizer=onebit_adam-freeze_step=100"));
    // ... and so are sweep.csv's cells, under a header no other column has.
    const std::string csv = slurp(out2 / "sweep.csv");
    CHECK(has(csv, "run,optimizer (swept),optimizer,"));
    CHECK(has(csv, "\n2,onebit_adam freeze_step=100,onebit_adam,"));
    CHECK_FALSE(has(csv, "{"));
    CHECK_FALSE(has(r.err, "bias_correction differs"));  // set alike: no warning
  }

  TEST_CASE("cost prices an experiment file, scaled up, keeping a warm-up share") {
    TempDir d;
    const auto file = d.file("a.json", kOneBit);
    const std::string scale =
        " --params 1.5e9 --workers 64 --steps 100000 --network ethernet_10g_a100x8 --json";
    Result r = run_bitlab(d, "cost " + file + scale + " --set optimizer.freeze_step=15%");
    REQUIRE(r.status == 0);
    const Json share = Json::parse(r.out);
    r = run_bitlab(d, "cost " + file + scale);
    REQUIRE(r.status == 0);
    const Json count = Json::parse(r.out);
    // 15 % of 100 000 steps warm up uncompressed: slower than a 100-step warm-up.
    CHECK(share.dump().find("15000") != std::string::npos);
    CHECK(share.dump() != count.dump());
    r = run_bitlab(d, "cost " + file);  // no network in the experiment, none given
    CHECK(r.status == 2);
    CHECK(has(r.err, "network"));
  }

  TEST_CASE("recost re-prices every run of a sweep and adds columns to sweep.csv") {
    TempDir d;
    d.file("a.json", R"({"steps": 20, "problem": {"name": "quadratic", "dim": 64},
      "cluster": {"workers": 4}, "optimizer": {"name": "adam", "lr": 0.01},
      "network": {"preset": "ethernet_10g_a100x8"}})");
    const auto sweep = d.file("s.json", R"({"name": "rs", "base": "a.json", "seeds": [1, 2]})");
    const auto out = d.path / "sweep";
    REQUIRE(run_bitlab(d, "sweep " + sweep + " --jobs 2 --out " + out.string()).status == 0);
    Result r = run_bitlab(d, "recost " + out.string() + " --network infiniband_hdr_a100x8");
    REQUIRE(r.status == 0);
    CHECK(has(r.out, "2 runs re-priced"));
    const std::string csv = slurp(out / "sweep.csv");
    CHECK(has(csv.substr(0, csv.find('\n')), ",comm_s@infiniband_hdr_a100x8,sim_time_s@"));
    // A second time with the same label is refused before any run changes.
    const std::string metrics = slurp(out / "run-001_seed=1" / "metrics.csv");
    r = run_bitlab(d, "recost " + out.string() + " --network infiniband_hdr_a100x8 --label " +
                          "infiniband_hdr_a100x8");
    CHECK(r.status == 2);
    CHECK(slurp(out / "run-001_seed=1" / "metrics.csv") == metrics);
  }
}
