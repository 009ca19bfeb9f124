// `bitlab cost`: the analytical communication plan against what a real
// Simulation logs, phase counts, a hand-computable price, and spec errors.
#include <doctest/doctest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/compressed_collectives.hpp"
#include "sim/collectives/onebit_allreduce.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/engine/simulation.hpp"
#include "sim/lab/cost.hpp"
#include "tests/cli_fixtures.hpp"
#include "tests/plan_check.hpp"

using namespace bitlab;

namespace {

Json base_spec() {
  return Json::parse(R"({
    "params": 1000000, "workers": 2, "steps": 100,
    "network": {"preset": "custom", "gpus_per_node": 2,
                "intra_latency_us": 10, "intra_bandwidth_gbps": 8,
                "inter_latency_us": 10, "inter_bandwidth_gbps": 8},
    "compute": {"step_ms": 10},
    "optimizer": {"name": "adam"}
  })");
}

std::string error_path(const Json& raw,
                       const std::vector<std::pair<std::string, std::string>>& labels = {},
                       std::string* message = nullptr) {
  try {
    resolve_cost_spec(raw, labels);
  } catch (const ConfigError& e) {
    if (message) *message = e.what();
    return e.path();
  }
  return "<no error>";
}

}  // namespace

TEST_SUITE("cost") {
  TEST_CASE("the plan equals what a real run logs: every registered optimizer, its defaults") {
    // A registry walk: an optimizer added later is covered here without a
    // line of this test. 130 steps pass the default warm-ups (freeze_step
    // 100); a plan with notes is an approximation (its counts are bounds).
    for (const auto& entry : optimizer_registry()) {
      INFO("optimizer ", entry.name);
      const Json opt = entry.resolve(Json{{"name", entry.name}}, "optimizer");
      const CommPlan plan = plan_communication(opt, 203, 4, 130);
      CHECK(plan.optimizer == entry.name);
      REQUIRE_FALSE(plan.phases.empty());
      check_plan_matches_run(opt, 4, 203, 130, plan.notes.empty());
    }
  }

  TEST_CASE("the plan equals what a real run logs: options that change the exchange") {
    const int64_t d = 203;  // not a multiple of any padding
    auto check = [&](const char* text, bool exact = true, int64_t steps = 24, int workers = 4,
                     int64_t tensors = 1) {
      check_plan_matches_run(Json::parse(text), workers, d, steps, exact, tensors);
    };
    check(R"({"name": "momentum_sgd", "wire": "bf16"})");
    check(R"({"name": "adam", "wire": "fp16"})");
    check(R"({"name": "onebit_adam", "freeze_step": 5, "wire": "fp16"})");
    check(R"({"name": "onebit_adam", "freeze_step": 5, "compression": "none"})");
    check(R"({"name": "onebit_adam", "freeze_step": 40})");  // never compresses
    check(R"({"name": "apmsqueeze", "freeze_step": 5, "switch": "fixed_step"})");
    // variance_stable: the plan's warm-up is an upper bound of the real one.
    check(R"({"name": "apmsqueeze", "freeze_step": 20, "min_warmup": 2, "var_threshold": 0.5})",
          false);
    check(R"({"name": "onebit_lamb", "freeze_step": 6})");
    check(R"({"name": "onebit_lamb", "freeze_step": 6, "pad_multiple": 64})");
    check(R"({"name": "zero_one_adam", "var_freeze_step": 10, "var_update_scaler": 2,
              "local_step_scaler": 3, "local_step_clipper": 4, "lr": 0.01})",
          true, 40);
    check(R"({"name": "zero_one_adam", "var_freeze_step": 6, "pad_multiple": 96,
              "wire": "fp16"})");
    check(
        R"({"name": "loco", "exchange": "flat", "gather": "quantized", "bits": 2, "group_size": 64})");
    check(R"({"name": "loco", "node_size": 2})");  // two_stage, 2 nodes: 203 falls back
    // two_stage compressing: 256 = 16 × 16, divisible by 2·workers (8 and 16).
    check_plan_matches_run(Json::parse(R"({"name": "loco", "node_size": 2})"), 4, 256, 6);
    check_plan_matches_run(
        Json::parse(R"({"name": "loco", "node_size": 2, "node_reduce": "sum", "gather": "fp32"})"),
        8, 256, 6);
    check(R"({"name": "loco", "gather": "fp32"})");
    check(R"({"name": "loco", "exchange": "allgather", "node_size": 2})");
    check(R"({"name": "loco", "exchange": "allgather", "node_size": 1})");
    check(R"({"name": "binsgdm", "node_size": 2})");
    check(R"({"name": "binsgdm", "node_size": 2})", true, 10, 6);        // 3 nodes
    check(R"({"name": "onebit_adam", "freeze_step": 3})", true, 10, 3);  // n not a power of two
    // Granularity tensor: one 1-bit allreduce per tensor (quadratic split in 3).
    check(R"({"name": "onebit_adam", "freeze_step": 5, "granularity": "tensor"})", true, 12, 4, 3);
    check(R"({"name": "onebit_adam", "freeze_step": 5, "granularity": "group"})", true, 12, 4, 3);
    check(R"({"name": "onebit_lamb", "freeze_step": 6, "granularity": "tensor"})", true, 12, 3, 3);
    check(R"({"name": "zero_one_adam", "var_freeze_step": 6, "var_update_scaler": 2,
              "granularity": "tensor"})",
          true, 16, 4, 5);
  }

  TEST_CASE("compressor per stage: the plan equals what a real run logs, for every optimizer") {
    const int64_t d = 203;
    check_plan_matches_run(Json::parse(R"({"name": "onebit_adam", "freeze_step": 5,
        "worker_compressor": {"name": "nbit", "bits": 4, "group_size": 16},
        "server_compressor": {"name": "topk", "ratio": 0.1}})"),
                           4, d, 12, true, 1);
    check_plan_matches_run(Json::parse(R"({"name": "apmsqueeze", "freeze_step": 5,
        "switch": "fixed_step",
        "worker_compressor": {"name": "randomk", "ratio": 0.2, "shared_seed": false},
        "server_compressor": {"name": "sign", "error_feedback": false}})"),
                           3, d, 12, true, 1);
    check_plan_matches_run(Json::parse(R"({"name": "onebit_lamb", "freeze_step": 6,
        "worker_compressor": {"name": "fp16"},
        "server_compressor": {"name": "nbit", "bits": 2, "scale_dtype": "fp16"}})"),
                           4, d, 12, true, 1);
    check_plan_matches_run(Json::parse(R"({"name": "zero_one_adam", "var_freeze_step": 6,
        "var_update_scaler": 2, "granularity": "tensor",
        "worker_compressor": {"name": "topk", "k": 7},
        "server_compressor": {"name": "randomk", "ratio": 0.5, "rescale": true}})"),
                           4, d, 16, true, 3);
  }

  TEST_CASE("compressor per stage: binarize is refused at either stage, naming the field") {
    std::string message;
    Json raw = base_spec();
    raw["optimizer"] =
        Json::parse(R"({"name": "onebit_adam", "server_compressor": {"name": "binarize"}})");
    CHECK(error_path(raw, {}, &message) == "optimizer.server_compressor.name");
    CHECK(message.find("[-1, 1]") != std::string::npos);
    raw["optimizer"] = Json::parse(
        R"({"name": "zero_one_adam", "worker_compressor": {"name": "nbit", "bits": 9}})");
    CHECK(error_path(raw) == "optimizer.worker_compressor.bits");
    raw["optimizer"] = Json::parse(
        R"({"name": "onebit_lamb", "worker_compressor": {"name": "sign", "error_feedback": 3}})");
    CHECK(error_path(raw) == "optimizer.worker_compressor.error_feedback");
    raw["optimizer"] = Json::parse(R"({"name": "onebit_adam", "worker_compressor": "sign"})");
    CHECK(error_path(raw) == "optimizer.worker_compressor");
  }

  TEST_CASE("granularity tensor: the plan needs tensor sizes; per-tensor padding by hand") {
    // n = 4, M = 32: tensors 100, 3, 100 pad to 128, 32, 128; per tensor the
    // alltoall sends 3/4 of D_p/8 bytes: 12, 3, 12.
    const Json opt = find_entry(optimizer_registry(), "onebit_adam")
                         ->resolve(Json::parse(R"({"name": "onebit_adam", "freeze_step": 1,
                                                   "granularity": "tensor"})"),
                                   "optimizer");
    const CommPlan plan = plan_communication(
        opt, 203, 4, 2, 0,
        {square_tensor("a", 0, 100), square_tensor("b", 100, 3), square_tensor("c", 103, 100)});
    const auto& rec = plan.phases.at(1).records;
    REQUIRE(rec.size() == 12);
    CHECK(record_text(rec[0]) == "alltoall pairwise bits all p4 g1 S16 sent12.000000 m3");
    CHECK(record_text(rec[4]) == "alltoall pairwise bits all p4 g1 S4 sent3.000000 m3");
    CHECK(record_text(rec[8]) == "alltoall pairwise bits all p4 g1 S16 sent12.000000 m3");
    // No layout: one tensor of params (PlanShape's convention).
    CHECK(plan_communication(opt, 203, 4, 2).phases.at(1).records.size() == 4);
    // A cost spec prices a stand-in layout unless it gives tensor_sizes: with
    // granularity tensor that would misprice, so it is exit 2 naming the field.
    std::string message;
    Json raw = base_spec();
    raw["optimizer"] = Json::parse(R"({"name": "onebit_adam", "granularity": "tensor"})");
    CHECK(error_path(raw, {}, &message) == "optimizer.granularity");
    CHECK(message.find("tensor_sizes") != std::string::npos);
    raw["tensor_sizes"] = Json::parse("[999999, 1]");
    CHECK(error_path(raw) == "<no error>");
    // The cost spec's tensor_sizes must sum to params.
    raw["tensor_sizes"] = Json::parse("[1, 2]");
    CHECK(error_path(raw, {}, &message) == "tensor_sizes");
    CHECK(message.find("must sum to params") != std::string::npos);
  }

  TEST_CASE("the collectives' closed forms, by hand (plan and run share them)") {
    // run() logs the records its plan() states, so the plan-vs-run checks
    // above cannot catch a wrong closed form: these known answers can.
    // 1-bit allreduce, n = 4, d = 203: D = 203 padded to 4·lcm(4, 8) = 32 → 224.
    const auto ob = OneBitAllreduce::plan(4, 203);
    REQUIRE(ob.size() == 4);
    CHECK(record_text(ob[0]) == "alltoall pairwise bits all p4 g1 S28 sent21.000000 m3");
    CHECK(record_text(ob[1]) == "allgather ring fp32 all p4 g1 S16 sent12.000000 m3");
    CHECK(record_text(ob[2]) == "allgather ring bits all p4 g1 S28 sent21.000000 m3");
    CHECK(record_text(ob[3]) == "allgather ring fp32 all p4 g1 S16 sent12.000000 m3");
    // LoCo's reduce-scatter, n = 4, d = 203, 4 bits, groups of 128: D = 512,
    // chunk 128 = one group: 64 bytes of codes + one fp32 scale = 68 per message.
    QuantizeSpec q;
    const auto rs = QuantizedReduceScatter::plan(4, 203, q, "fp16");
    REQUIRE(rs.size() == 2);
    CHECK(record_text(rs[0]) == "alltoall pairwise int4 all p4 g1 S272 sent204.000000 m3");
    CHECK(record_text(rs[1]) == "allgather ring fp16 all p4 g1 S1024 sent768.000000 m3");
    // Compressed allgather, 6 workers in 3 nodes of 2, 26-byte images (208
    // elements binarized: one bit each).
    const auto ag = CompressedAllgatherMean::plan(6, 2, 208, BinarizeCompressor());
    REQUIRE(ag.size() == 3);
    CHECK(record_text(ag[0]) == "allgather ring bits intra p2 g3 S52 sent26.000000 m1");
    CHECK(record_text(ag[1]) == "allgather ring bits inter p3 g1 S78 sent52.000000 m2");
    CHECK(record_text(ag[2]) == "broadcast tree bits intra p2 g3 S78 sent39.000000 m1");
    CHECK(CompressedAllgatherMean::plan(6, 0, 208, BinarizeCompressor()).size() == 1);  // flat
    // Ring allreduce of 203 fp16 values on 4 workers: 2(n−1)/n · S.
    CHECK(record_text(allreduce_record(4, 203, WireDtype::kFp16, "ring")) ==
          "allreduce ring fp16 all p4 g1 S406 sent609.000000 m6");
  }

  TEST_CASE("phase counts over a run") {
    const auto* zo = find_entry(optimizer_registry(), "zero_one_adam");
    const Json opt = zo->resolve(Json::parse(R"({"name": "zero_one_adam", "var_freeze_step": 1000,
        "var_update_scaler": 16, "local_step_scaler": 1000, "local_step_clipper": 16})"),
                                 "optimizer");
    const CommPlan plan = plan_communication(opt, 340000000, 64, 10000);
    std::map<std::string, int64_t> c;
    for (const auto& p : plan.phases) c[p.name] = p.steps;
    CHECK(c["full"] == 96);
    CHECK(c["onebit"] == 904);
    CHECK(c["sync"] == 2188);
    CHECK(c["local"] == 6812);

    const auto* ob = find_entry(optimizer_registry(), "onebit_adam");
    const CommPlan p1 = plan_communication(
        ob->resolve(Json{{"name", "onebit_adam"}, {"freeze_step", 1500}}, "optimizer"), 340000000,
        64, 10000);
    REQUIRE(p1.phases.size() == 2);
    CHECK(p1.phases[0].name == "warmup");
    CHECK(p1.phases[0].steps == 1500);
    CHECK(p1.phases[1].steps == 8500);
    // 340 M parameters, 64 workers: D = 340 M padded to 64·lcm(64, 8) = 4096.
    const int64_t D = (340000000 + 4095) / 4096 * 4096;
    CHECK(p1.phases[1].records[0].payload_bytes == D / 8);
    CHECK(p1.notes.empty());

    const auto* ap = find_entry(optimizer_registry(), "apmsqueeze");
    const CommPlan p2 = plan_communication(
        ap->resolve(Json{{"name", "apmsqueeze"}, {"freeze_step", 20000}}, "optimizer"), 1000, 8,
        10000);
    CHECK(p2.phases[0].steps == 10000);  // capped at the run
    CHECK(p2.phases[1].steps == 0);
    CHECK(p2.notes.size() == 1);
  }

  TEST_CASE("a hand-computable price: 2 workers on one node, adam fp32") {
    const CostReport r = estimate_cost(resolve_cost_spec(base_spec()));
    CHECK(r.topology.nodes == 1);
    CHECK(r.topology.gpus_per_node == 2);
    // α = 10 us, B = 8 Gbit/s = 1e9 B/s, S = 4e6 bytes: 2α + S/B = 4.02 ms.
    const double step_s = 0.010 + 2 * 10e-6 + 4e6 / 1e9;
    REQUIRE(r.job.phases.size() == 1);
    CHECK(r.job.phases[0].time.step_s == doctest::Approx(step_s).epsilon(1e-12));
    CHECK(r.job.total_s == doctest::Approx(100 * step_s).epsilon(1e-12));
    CHECK(r.job.total_sent_bytes == doctest::Approx(100 * 4e6).epsilon(1e-12));
    CHECK(r.baseline_fp16.total_s ==
          doctest::Approx(100 * (0.010 + 2 * 10e-6 + 2e-3)).epsilon(1e-12));
    // The same job as the fp32 baseline: speed-up exactly 1.
    const Json j = cost_report_json(r);
    CHECK(j["speedup"]["vs_adam_fp32"].get<double>() == 1.0);
    CHECK(j["volume_ratio"]["adam_fp32_over_this"].get<double>() == 1.0);
    CHECK(j["speedup"]["vs_adam_fp16"].get<double>() < 1.0);

    Json fp16 = base_spec();
    fp16["optimizer"]["wire"] = "fp16";
    const CostReport r16 = estimate_cost(resolve_cost_spec(fp16));
    CHECK(r16.baseline_fp16.total_s / r16.job.total_s == 1.0);
    CHECK(!format_cost_report(r16).empty());
  }

  TEST_CASE("1-bit Adam on a slow network: the compression stage is faster") {
    Json raw = base_spec();
    raw["params"] = 340e6;
    raw["workers"] = 64;
    raw["steps"] = 1000;
    raw["network"] = {{"preset", "ethernet_40g_v100x4"}};
    raw["optimizer"] = {{"name", "onebit_adam"}, {"freeze_step", 150}, {"wire", "fp16"}};
    const CostReport r = estimate_cost(resolve_cost_spec(raw));
    CHECK(r.topology.nodes == 16);
    REQUIRE(r.job.phases.size() == 2);
    // The warm-up step is Adam fp16's step.
    CHECK(r.job.phases[0].time.step_s == r.baseline_fp16.phases[0].time.step_s);
    CHECK(r.job.phases[1].time.step_s < r.job.phases[0].time.step_s / 3);
    // Volume: 1-bit sends ≈ 1/16 of fp16 in the compression stage.
    const double v = r.baseline_fp16.phases[0].sent_bytes / r.job.phases[1].sent_bytes;
    CHECK(v == doctest::Approx(16.0).epsilon(0.01));
  }

  TEST_CASE("bad spec values give ConfigErrors naming the field") {
    Json raw = base_spec();
    raw["params"] = -3;
    CHECK(error_path(raw) == "params");
    raw = base_spec();
    raw.erase("workers");
    CHECK(error_path(raw) == "workers");
    raw = base_spec();
    raw["network"]["preset"] = "ethernet_4g";
    CHECK(error_path(raw) == "network.preset");
    raw = base_spec();
    raw["network"] = {{"preset", "none"}};
    CHECK(error_path(raw) == "network.preset");
    raw = base_spec();
    raw.erase("network");
    CHECK(error_path(raw) == "network");
    raw = base_spec();
    raw["network"]["intra_bandwidth_gbps"] = 0;
    CHECK(error_path(raw) == "network.intra_bandwidth_gbps");
    raw = base_spec();
    raw["workers"] = 6;
    raw["network"] = {{"preset", "ethernet_40g_v100x4"}};
    CHECK(error_path(raw) == "network.gpus_per_node");
    raw = base_spec();
    raw["compute"]["overlap"] = 2;
    CHECK(error_path(raw) == "compute.overlap");
    raw = base_spec();
    raw["optimizer"] = {{"name", "onebit_adam"}, {"freeze_step", -3}};
    CHECK(error_path(raw) == "optimizer.freeze_step");
    raw = base_spec();
    raw["optimizer"] = {{"name", "onebit_adam"}, {"pad_multiple", 12}};
    CHECK(error_path(raw) == "optimizer.pad_multiple");
    raw = base_spec();
    raw["optimizer"] = {{"name", "binsgdm"}, {"node_size", 3}};
    CHECK(error_path(raw) == "optimizer.node_size");
    raw = base_spec();
    raw["optimizer"] = {{"name", "adamm"}};
    std::string msg;
    CHECK(error_path(raw, {}, &msg) == "optimizer.name");
    CHECK(msg.find("did you mean \"adam\"") != std::string::npos);
    raw = base_spec();
    raw["stpes"] = 3;
    CHECK(error_path(raw) == "stpes");
    // An override names itself.
    raw = base_spec();
    raw["workers"] = 0;
    CHECK(error_path(raw, {{"workers=0", "--workers 0"}}, &msg) == "workers");
    CHECK(msg.rfind("--workers 0: workers = 0: must be >= 1", 0) == 0);
  }

  TEST_CASE("gradient accumulation: N micro-steps of compute, one exchange per step") {
    // The worked example of docs/time-model.md: base_spec with 4 micro-steps
    // of 10 ms: compute 40 ms, the fp32 ring allreduce of 4 MB on 2 workers
    // 2α + S/B = 4.02 ms once, step 44.02 ms, 100 steps 4.402 s. Tolerance
    // 1e-12 relative: the same few double operations, reordered.
    using testing::run_bitlab;
    testing::TempDir d;
    const auto spec = d.file("spec.json", base_spec().dump());
    testing::Result r = run_bitlab(d, "cost " + spec + " --gradient-accumulation-steps 4 --json");
    REQUIRE(r.status == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["compute_s_per_step"].get<double>() == doctest::Approx(0.040).epsilon(1e-12));
    const Json& phase = j["optimizer"]["phases"][0];
    CHECK(phase["comm_s"].get<double>() == doctest::Approx(0.00402).epsilon(1e-12));
    CHECK(phase["step_s"].get<double>() == doctest::Approx(0.04402).epsilon(1e-12));
    CHECK(phase["steps"] == 100);  // optimizer steps
    CHECK(j["optimizer"]["total_s"].get<double>() == doctest::Approx(4.402).epsilon(1e-12));
    // The same bytes as without accumulation: one exchange per step.
    r = run_bitlab(d, "cost " + spec + " --json");
    REQUIRE(r.status == 0);
    const Json one = Json::parse(r.out);
    CHECK(one["optimizer"]["total_sent_bytes_per_worker"] ==
          j["optimizer"]["total_sent_bytes_per_worker"]);
    CHECK(one["optimizer"]["phases"][0]["step_s"].get<double>() ==
          doctest::Approx(0.01402).epsilon(1e-12));
    // The flag is --set compute.gradient_accumulation_steps.
    r = run_bitlab(d, "cost " + spec + " --set compute.gradient_accumulation_steps=4 --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["optimizer"] == j["optimizer"]);
    // The text says it.
    r = run_bitlab(d, "cost " + spec + " --gradient-accumulation-steps 4");
    CHECK(r.out.find("= 4 micro-steps (compute.gradient_accumulation_steps) of ") !=
          std::string::npos);
    // Overlap hides the allreduce behind the last micro-step's backward only:
    // 0.3 · 2/3 · 10 ms = 2 ms hidden (not 0.3 · 2/3 · 40 ms = 8 ms, which
    // would hide all 4.02 ms): step 40 + 4.02 - 2 = 42.02 ms.
    r = run_bitlab(d, "cost " + spec + " --gradient-accumulation-steps 4 --set compute.overlap=0.3 --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["optimizer"]["phases"][0]["step_s"].get<double>() ==
          doctest::Approx(0.04202).epsilon(1e-12));
    // Bad values: exit 2 naming the flag, the field and the rule.
    r = run_bitlab(d, "cost " + spec + " --gradient-accumulation-steps 0");
    CHECK(r.status == 2);
    CHECK(r.err.find("--gradient-accumulation-steps 0: compute.gradient_accumulation_steps = 0: "
                     "must be >= 1") != std::string::npos);
    r = run_bitlab(d, "cost " + spec + " --gradient-accumulation-steps 2.5");
    CHECK(r.status == 2);
    CHECK(r.err.find("compute.gradient_accumulation_steps") != std::string::npos);
  }

  TEST_CASE("gradient accumulation from a DeepSpeed config reaches cost") {
    using testing::run_bitlab;
    testing::TempDir d;
    d.file("ds.json", R"({"train_batch_size": 4096, "train_micro_batch_size_per_gpu": 16,
      "gradient_accumulation_steps": 4,
      "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": 50}}})");
    const auto file = d.file("e.json", R"({"name": "ga", "steps": 200,
      "deepspeed_config": "ds.json", "problem": {"name": "logistic", "dim": 20},
      "network": {"preset": "ethernet_40g_v100x4"}, "compute": {"step_ms": 10}})");
    const testing::Result r = run_bitlab(d, "cost " + file + " --json");
    REQUIRE(r.status == 0);
    const Json j = Json::parse(r.out);
    CHECK(j["spec"]["compute"]["gradient_accumulation_steps"] == 4);
    CHECK(j["spec"]["workers"] == 64);                  // 4096 / (16 · 4)
    CHECK(j["spec"]["samples_per_worker"] == 64.0);     // 16 · 4 per optimizer step
    CHECK(j["compute_s_per_step"].get<double>() == doctest::Approx(0.040).epsilon(1e-12));
  }

  TEST_CASE("cost switches optimizer as run does, warns of short warm-ups, marks descriptions") {
    using testing::run_bitlab;
    testing::TempDir d;
    const auto file = d.file("bert.json", R"({
      "description": "BERT-Large, 1-bit Adam with 15 % warm-up",
      "params": 340e6, "workers": 64, "steps": 100000,
      "network": {"preset": "ethernet_40g_v100x4"}, "compute": {"step_ms": 58.82},
      "optimizer": {"name": "onebit_adam", "freeze_step": 15000, "wire": "fp16", "eps": 1e-8}})");
    // --optimizer keeps the options both know (freeze_step, wire), as run's
    // --set optimizer.name does; onebit_lamb has eps too.
    testing::Result r = run_bitlab(d, "cost " + file + " --optimizer onebit_lamb --json");
    REQUIRE(r.status == 0);
    const Json lamb = Json::parse(r.out);
    CHECK(lamb["spec"]["optimizer"]["name"] == "onebit_lamb");
    CHECK(lamb["spec"]["optimizer"]["freeze_step"] == 15000);
    CHECK(lamb["spec"]["optimizer"]["wire"] == "fp16");
    CHECK(lamb["overrides"] == Json::array({"--optimizer onebit_lamb"}));
    r = run_bitlab(d, "cost " + file + " --set optimizer.name=onebit_lamb --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["optimizer"] == lamb["optimizer"]);
    // --set optimizer.name=adam: what adam does not know is dropped, said.
    r = run_bitlab(d, "cost " + file + " --set optimizer.name=adam");
    REQUIRE(r.status == 0);
    CHECK(r.out.find("warning: --set optimizer.name=adam: adam does not know onebit_adam's "
                     "freeze_step") != std::string::npos);
    // A later --set may give the new optimizer's options.
    r = run_bitlab(d, "cost " + file + " --optimizer zero_one_adam --set optimizer.var_freeze_step=20% --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["spec"]["optimizer"]["var_freeze_step"] == 20000);
    // The description is the file's once anything is changed.
    r = run_bitlab(d, "cost " + file + " --optimizer onebit_lamb");
    CHECK(r.out.find("\n  the file (before the changes below): BERT-Large, 1-bit Adam with 15 % "
                     "warm-up\n  priced with: --optimizer onebit_lamb\n") != std::string::npos);
    r = run_bitlab(d, "cost " + file);
    CHECK(r.out.find("\n  BERT-Large, 1-bit Adam with 15 % warm-up\ntopology") != std::string::npos);
    CHECK(r.out.find("priced with") == std::string::npos);
    CHECK(r.out.find("warning:") == std::string::npos);  // 15 % warm-up: nothing to say

    // Flags only: the default freeze_step 100 is 0.1 % of 100 000 steps.
    const std::string flags =
        "cost --params 340e6 --workers 64 --steps 100000 --network ethernet_40g_v100x4 ";
    r = run_bitlab(d, flags + "--optimizer onebit_adam");
    REQUIRE(r.status == 0);
    CHECK(r.out.find("warning: optimizer.freeze_step = 100 is 0.1 % of steps = 100000") !=
          std::string::npos);
    r = run_bitlab(d, flags + "--optimizer zero_one_adam --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["warnings"].dump().find("optimizer.var_freeze_step = 100 is 0.1 %") !=
          std::string::npos);
    // At 1 % and above, or with a share, nothing is said.
    r = run_bitlab(d, flags + "--optimizer onebit_adam --set optimizer.freeze_step=1000");
    CHECK(r.out.find("warning:") == std::string::npos);
    r = run_bitlab(d, flags + "--optimizer onebit_lamb --set optimizer.freeze_step=999");
    CHECK(r.out.find("warning: optimizer.freeze_step = 999 is 0.999 % of steps") !=
          std::string::npos);
    // A warm-up as long as the job, as run says it.
    r = run_bitlab(d, "cost --params 340e6 --workers 64 --steps 50 --network "
                      "ethernet_40g_v100x4 --optimizer onebit_adam");
    CHECK(r.out.find("is not below steps = 50") != std::string::npos);
  }

  TEST_CASE("cost of an experiment file never builds its problem") {
    using testing::run_bitlab;
    testing::TempDir d;
    // 1e12 parameters: 4 TB if it were built.
    const auto big = d.file("big.json", R"({"name": "big", "steps": 1000,
      "problem": {"name": "quadratic", "dim": 1000000000000},
      "cluster": {"workers": 64}, "network": {"preset": "ethernet_40g_v100x4"},
      "optimizer": {"name": "onebit_adam", "freeze_step": "15%"}})");
    testing::Result r = run_bitlab(d, "cost " + big + " --json");
    REQUIRE(r.status == 0);
    CHECK(Json::parse(r.out)["spec"]["params"] == int64_t{1000000000000});
    // A width whose square overflows int64: exit 2 naming it (it used to wrap
    // to a negative count).
    const auto wide = d.file("wide.json", R"({"name": "wide", "steps": 10,
      "problem": {"name": "deep_mlp", "dataset": "digits", "widths": [4294967296, 4294967296]},
      "network": {"preset": "ethernet_40g_v100x4"}, "cluster": {"workers": 4},
      "optimizer": {"name": "adam"}})");
    r = run_bitlab(d, "cost " + wide);
    CHECK(r.status == 2);
    CHECK(r.err.find("problem.widths = ") != std::string::npos);
    CHECK(r.err.find(": makes more than 2^63 - 1 parameters") != std::string::npos);
    CHECK(r.out.empty());
  }

  // -------------------------------------------------------------------------
  // ZeRO (sim/lab/zero_plan.hpp, docs/algorithms.md §11)

  TEST_CASE("ZeRO memory: Adam at stages 0-3 equals DeepSpeed's estimators") {
    // DeepSpeed's estimators (microsoft/DeepSpeed, no offload), restated:
    //   estimate_zero2_model_states_mem_needs (runtime/zero/stage_1_and_2.py):
    //     gpu_mem = 2 * total_params + int(18 * total_params / total_gpus)
    //   estimate_zero3_model_states_mem_needs (runtime/zero/stage3.py):
    //     gpu_mem = 4 * largest_layer_params + int(18 * total_params / total_gpus)
    // Stage 0 is the ZeRO-2 estimator on one GPU (nothing to share: 20 P);
    // stage 1 keeps the estimator's 2 bytes of fp16 gradients whole: 4 P +
    // int(16 P / N). P is prime, so 18 P / N is not a whole number: the
    // truncation must be DeepSpeed's (int() of the quotient).
    const int64_t p = 1000003, layer = 12347;
    for (const int n : {1, 4, 8}) {
      const auto zero2 = [&](int gpus) {
        return 2 * p + static_cast<int64_t>(18.0 * static_cast<double>(p) / gpus);
      };
      const int64_t expected[4] = {
          zero2(1), 4 * p + static_cast<int64_t>(16.0 * static_cast<double>(p) / n), zero2(n),
          4 * layer + static_cast<int64_t>(18.0 * static_cast<double>(p) / n)};
      for (int64_t stage = 0; stage <= 3; ++stage) {
        INFO("workers ", n, " stage ", stage);
        Json raw = base_spec();
        raw["params"] = p;
        raw["workers"] = n;
        raw["network"]["gpus_per_node"] = 4;
        raw["largest_layer_params"] = layer;
        raw["zero"] = {{"stage", stage}};
        const CostReport rep = estimate_cost(resolve_cost_spec(raw));
        CHECK(rep.memory.total_bytes == expected[stage]);
        CHECK(rep.baseline_memory.total_bytes == expected[stage]);  // the baseline is Adam
        CHECK(rep.stages[static_cast<size_t>(stage)].memory_bytes == expected[stage]);
        // The parts add up to the total (up to the truncation, < 1 byte).
        const ZeroMemory& m = rep.memory;
        CHECK(std::abs(m.params_bytes + m.gradients_bytes + m.optimizer_state_bytes +
                       m.error_buffer_bytes + m.working_bytes -
                       static_cast<double>(m.total_bytes)) < 1.0);
      }
    }
  }

  TEST_CASE("ZeRO time: stages 1/2 split the allreduce into a reduce-scatter and an all-gather") {
    // On a ring, reduce-scatter + all-gather of S bytes is the allreduce's
    // 2(p-1) alpha + 2(p-1)/p S/B: the same time at stage 0 and 1 (fp16).
    Json raw = base_spec();
    raw["workers"] = 4;
    raw["network"]["gpus_per_node"] = 4;
    raw["optimizer"] = {{"name", "adam"}, {"wire", "fp16"}};
    const double t0 = estimate_cost(resolve_cost_spec(raw)).job.total_s;
    raw["zero"] = {{"stage", 1}};
    const CostReport r1 = estimate_cost(resolve_cost_spec(raw));
    CHECK(r1.job.total_s == doctest::Approx(t0).epsilon(1e-12));  // rounding only
    const auto& recs = r1.job.phases.at(0).plan.records;
    REQUIRE(recs.size() == 2);
    CHECK(std::string(recs[0].op) == "reduce_scatter");
    CHECK(std::string(recs[1].op) == "allgather");
    CHECK(recs[0].payload_bytes == 2 * 1000000);
    CHECK(recs[1].payload_bytes == 2 * 1000000);
    CHECK(r1.in_deepspeed);
    // Buckets of 300 000 elements: 4 reduce-scatters (3 full, 1 of 100 000)
    // and, at stage 2 with 3 micro-steps, every micro-step's.
    raw["zero"] = {{"stage", 2}, {"reduce_bucket_size", 300000}};
    raw["compute"]["gradient_accumulation_steps"] = 3;
    const CostReport r2 = estimate_cost(resolve_cost_spec(raw));
    int reduce = 0, gather = 0;
    for (const auto& r : r2.job.phases.at(0).plan.records) {
      (std::string(r.op) == "reduce_scatter" ? reduce : gather) += 1;
    }
    CHECK(reduce == 12);
    CHECK(gather == 1);
    raw["zero"]["stage"] = 1;  // stage 1 reduces once a step
    reduce = 0;
    const CostReport r1b = estimate_cost(resolve_cost_spec(raw));
    for (const auto& r : r1b.job.phases.at(0).plan.records) {
      reduce += std::string(r.op) == "reduce_scatter";
    }
    CHECK(reduce == 4);
  }

  TEST_CASE("ZeRO-3 and ZeRO++: gathers forward and backward, qwZ int8, hpZ inside the node") {
    Json raw = base_spec();
    raw["workers"] = 8;
    raw["network"]["gpus_per_node"] = 4;
    raw["tensor_sizes"] = {600000, 400000};
    raw["zero"] = {{"stage", 3}};
    const CostReport plain = estimate_cost(resolve_cost_spec(raw));
    std::vector<std::string> ops;
    for (const auto& r : plain.job.phases.at(0).plan.records) {
      ops.push_back(std::string(r.op) + " " + r.dtype + " " + r.scope + " " +
                    std::to_string(r.payload_bytes));
    }
    // Forward: both tensors gathered in fp16; backward again; then the
    // gradient reduce-scatter (Adam's fp32 allreduce, one bucket).
    CHECK(ops == std::vector<std::string>{"allgather fp16 all 1200000", "allgather fp16 all 800000",
                                          "allgather fp16 all 1200000", "allgather fp16 all 800000",
                                          "reduce_scatter fp32 all 4000000"});
    CHECK(plain.spec.zero.overlap_comm);  // DeepSpeed's default at stage 3
    raw["zero"] = {{"stage", 3}, {"zero_quantized_weights", true}, {"zero_hpz_partition_size", 4}};
    const CostReport pp = estimate_cost(resolve_cost_spec(raw));
    const auto& recs = pp.job.phases.at(0).plan.records;
    REQUIRE(recs.size() == 9);
    // int8 codes and an fp32 scale per block of at most 8000 (CUDAQuantizer).
    CHECK(std::string(recs[0].dtype) == "int8");
    CHECK(recs[0].payload_bytes == 600000);
    CHECK(recs[1].payload_bytes == 4 * 75);
    // Backward from hpZ's secondary copy: groups of 4 inside each node.
    CHECK(std::string(recs[4].scope) == "intra");
    CHECK(recs[4].ranks == 4);
    CHECK(recs[4].groups == 2);
    CHECK(pp.job.total_s < plain.job.total_s);
    // hpZ keeps a secondary int8 copy of 1/4 of the model (plus its scales).
    CHECK(pp.memory.params_bytes ==
          doctest::Approx(2.0 * 1000000 / 8 + (1000000.0 + 4 * 125) / 4).epsilon(1e-12));
  }

  TEST_CASE("1-bit Adam at ZeRO-1/2: priced, marked not available in DeepSpeed") {
    Json raw = base_spec();
    raw["workers"] = 8;
    raw["network"]["gpus_per_node"] = 4;
    raw["optimizer"] = {{"name", "onebit_adam"}, {"freeze_step", 10}};
    const CostReport r0 = estimate_cost(resolve_cost_spec(raw));
    CHECK(r0.in_deepspeed);
    raw["zero"] = {{"stage", 1}};
    const CostReport r1 = estimate_cost(resolve_cost_spec(raw));
    CHECK_FALSE(r1.in_deepspeed);
    CHECK(format_cost_report(r1).find("not available in DeepSpeed") != std::string::npos);
    CHECK(cost_report_json(r1)["available_in_deepspeed"] == false);
    // Compression stage: its compressed exchange as at stage 0, plus the
    // fp16 all-gather of the updated partitions.
    const auto& c0 = r0.job.phases.at(1).plan.records;
    const auto& c1 = r1.job.phases.at(1).plan.records;
    REQUIRE(c1.size() == c0.size() + 1);
    CHECK(std::string(c1.back().op) == "allgather");
    CHECK(c1.back().payload_bytes == 2 * 1000000);
    // Memory (docs/algorithms.md §11): fp16 params 2 + fp16 grads 2 +
    // momentum 4 + worker error 4 whole; fp32 grads, master, variance and
    // the server error (4 each) sharded: 12 P + 16 P / N, against stage 0's
    // 24 P + 4 P / N.
    const double p = 1000000;
    CHECK(r1.memory.total_bytes == static_cast<int64_t>(12 * p + 16 * p / 8));
    CHECK(r0.memory.total_bytes == static_cast<int64_t>(24 * p + 4 * p / 8));
    // No stage-3 form: the stage table says so.
    CHECK_FALSE(r1.stages.at(3).available);
    CHECK(r1.stages.at(3).why_not.find("no partitioned form") != std::string::npos);
  }

  TEST_CASE("ZeRO bad input: stage, optimizer without a partitioned form, hpZ, GPU memory") {
    std::string msg;
    Json raw = base_spec();
    raw["zero"] = {{"stage", 4}};
    CHECK(error_path(raw, {}, &msg) == "zero.stage");
    CHECK(msg.find("zero.stage = 4: must be <= 3") != std::string::npos);
    raw["zero"] = {{"stage", 3}};
    raw["optimizer"] = {{"name", "onebit_adam"}};
    CHECK(error_path(raw, {}, &msg) == "zero.stage");
    CHECK(msg.find("onebit_adam has no partitioned form at stage 3") != std::string::npos);
    raw = base_spec();
    raw["workers"] = 8;
    raw["network"]["gpus_per_node"] = 4;
    raw["zero"] = {{"stage", 3}, {"zero_hpz_partition_size", 3}};
    CHECK(error_path(raw, {}, &msg) == "zero.zero_hpz_partition_size");
    CHECK(msg.find("must divide the GPUs of a node (4 here)") != std::string::npos);
    raw["zero"] = {{"stage", 2}, {"zero_quantized_gradients", true}};
    CHECK(error_path(raw) == "zero.zero_quantized_gradients");
    raw = base_spec();
    raw["gpu_memory_gb"] = 0;
    CHECK(error_path(raw, {}, &msg) == "gpu_memory_gb");
    CHECK(msg.find("gpu_memory_gb = 0: must be > 0") != std::string::npos);
    // The command line: exit 2, nothing on stdout.
    using testing::run_bitlab;
    testing::TempDir d;
    const std::string job = "cost --params 1e6 --workers 8 --steps 10 --network ethernet_40g_v100x4 ";
    for (const char* bad : {"--zero-stage 5", "--gpu-memory-gb -1",
                            "--optimizer zero_one_adam --zero-stage 3",
                            "--zero-stage 3 --set zero.zero_hpz_partition_size=3"}) {
      INFO(bad);
      const testing::Result r = run_bitlab(d, job + bad);
      CHECK(r.status == 2);
      CHECK(r.out.empty());
    }
    // Fits or not: 1e9 parameters of Adam at stage 0 need 20 GB.
    testing::Result r = run_bitlab(d, "cost --params 1e9 --workers 8 --steps 10 --network "
                                      "ethernet_40g_v100x4 --optimizer adam --gpu-memory-gb 16");
    CHECK(r.status == 0);
    CHECK(r.out.find("adam does NOT fit (20 GB of 16 GB)") != std::string::npos);
    r = run_bitlab(d, "cost --params 1e9 --workers 8 --steps 10 --network ethernet_40g_v100x4 "
                      "--optimizer adam --gpu-memory-gb 16 --zero-stage 2 --json");
    CHECK(Json::parse(r.out)["memory_per_gpu"]["optimizer"]["fits"] == true);
  }

  TEST_CASE("the limiting link of each phase, and a fitted network used beyond its nodes") {
    using testing::run_bitlab;
    testing::TempDir d;
    // Fitted on one node of 4: priced on 2 nodes, cost warns.
    const auto net = d.file("net.json", R"({"format": "bitlab-network-1", "name": "fit",
      "network": {"gpus_per_node": 4, "intra_latency_us": 5, "intra_bandwidth_gbps": 96,
                  "inter_latency_us": 30, "inter_bandwidth_gbps": 10},
      "fit": {"points": [{"nodes": 1, "gpus_per_node": 4}, {"nodes": 1, "gpus_per_node": 2}]}})");
    Json raw = base_spec();
    raw["network"] = {{"file", net}};
    raw["workers"] = 4;
    CostReport rep = estimate_cost(resolve_cost_spec(raw));
    CHECK(rep.links.at(0).inter == false);
    CHECK(format_cost_report(rep).find("inside a node: 96 Gbit/s, 5 us") != std::string::npos);
    for (const auto& w : rep.warnings) CHECK(w.find("fitted on") == std::string::npos);
    raw["workers"] = 8;
    rep = estimate_cost(resolve_cost_spec(raw));
    CHECK(rep.links.at(0).inter == true);
    CHECK(rep.links.at(0).share == 1.0);  // a flat ring across nodes: all on the NIC
    bool warned = false;
    for (const auto& w : rep.warnings) {
      warned = warned || w.find("fitted on measurements over 1 node(s); this job spans 2") !=
                             std::string::npos;
    }
    CHECK(warned);
    // A file without a fit report (hand-written) warns of nothing.
    const auto bare = d.file("bare.json", R"({"format": "bitlab-network-1",
      "network": {"gpus_per_node": 4, "intra_latency_us": 5, "intra_bandwidth_gbps": 96,
                  "inter_latency_us": 30, "inter_bandwidth_gbps": 10}})");
    raw["network"] = {{"file", bare}};
    rep = estimate_cost(resolve_cost_spec(raw));
    CHECK(rep.topology.fitted_max_nodes == 0);
  }
}
