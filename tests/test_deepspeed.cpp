// DeepSpeed configs read as they are (sim/engine/deepspeed.hpp,
// docs/deepspeed.md): each optimizer type, the batch rule, the refusals, the
// ignored fields, and the "deepspeed_config" key of an experiment file.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cli_fixtures.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/deepspeed.hpp"

using namespace bitlab;
using bitlab::testing::TempDir;

namespace {

// A DeepSpeed config with the batch fields every config needs and the given
// optimizer section.
Json ds_with(const Json& optimizer) {
  Json ds = {{"train_batch_size", 64}, {"train_micro_batch_size_per_gpu", 8},
             {"gradient_accumulation_steps", 2}};
  if (!optimizer.is_null()) ds["optimizer"] = optimizer;
  return ds;
}

std::string error_of(const Json& ds) {
  try {
    map_deepspeed_config(ds, "ds.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

bool has_line(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

// The fragment under a small problem, resolved as bitlab resolves a file.
Experiment resolved(const DeepSpeedMapping& m) {
  Json raw = m.experiment;
  raw["steps"] = 10;
  raw["problem"] = {{"name", "logistic"}, {"dim", 8}, {"samples", 256}};
  return resolve_experiment(raw, "ds");
}

}  // namespace

TEST_SUITE("deepspeed") {
  TEST_CASE("Adam and AdamW map to bitlab's adam with FusedAdam's defaults") {
    for (const char* type : {"Adam", "AdamW", "adamw", "ADAM"}) {
      CAPTURE(type);
      const auto m = map_deepspeed_config(
          ds_with({{"type", type},
                   {"params", {{"lr", 2e-4}, {"betas", {0.8, 0.99}}, {"weight_decay", 0.01}}}}),
          "ds.json");
      const Json& o = m.experiment["optimizer"];
      CHECK(o["name"] == "adam");
      CHECK(o["lr"] == 2e-4);
      CHECK(o["beta1"] == 0.8);
      CHECK(o["beta2"] == 0.99);
      CHECK(o["eps"] == 1e-8);
      CHECK(o["weight_decay"] == 0.01);
      CHECK(o["bias_correction"] == true);  // FusedAdam's default
      CHECK(o["wire"] == "fp32");
      CHECK(resolved(m).optimizer["weight_decay"] == 0.01);
    }
    // Adam with adam_w_mode false is L2 weight decay, which bitlab lacks...
    const std::string l2 = error_of(ds_with(
        {{"type", "Adam"}, {"params", {{"weight_decay", 0.1}, {"adam_w_mode", false}}}}));
    CHECK(l2.find("ds.json: optimizer.params.adam_w_mode = false: with weight_decay > 0") == 0);
    // ... harmless without weight decay, and AdamW overrides it.
    CHECK(error_of(ds_with({{"type", "Adam"}, {"params", {{"adam_w_mode", false}}}})).empty());
    const auto w = map_deepspeed_config(
        ds_with({{"type", "AdamW"}, {"params", {{"weight_decay", 0.1}, {"adam_w_mode", false}}}}),
        "ds.json");
    CHECK(has_line(w.notes, "overridden by type AdamW"));
    CHECK(error_of(ds_with({{"type", "Adam"}, {"params", {{"amsgrad", true}}}}))
              .find("optimizer.params.amsgrad = true: AMSGrad is not supported") !=
          std::string::npos);
  }

  TEST_CASE("Lamb maps to bitlab's lamb with FusedLamb's bias correction") {
    const auto m = map_deepspeed_config(
        ds_with({{"type", "Lamb"}, {"params", {{"lr", 0.01}, {"max_coeff", 0.3}, {"min_coeff", 0.1}}}}),
        "ds.json");
    const Json& o = m.experiment["optimizer"];
    CHECK(o["name"] == "lamb");
    CHECK(o["bias_correction"] == true);
    CHECK(o["max_coeff"] == 0.3);
    CHECK(o["min_coeff"] == 0.1);
    CHECK(resolved(m).optimizer["name"] == "lamb");
    CHECK(error_of(ds_with({{"type", "Lamb"}, {"params", {{"eps_inside_sqrt", true}}}}))
              .find("optimizer.params.eps_inside_sqrt = true") != std::string::npos);
  }

  TEST_CASE("the 1-bit family maps with DeepSpeed's defaults and no bias correction") {
    const auto a = map_deepspeed_config(
        ds_with({{"type", "OneBitAdam"},
                 {"params",
                  {{"lr", 4e-4}, {"freeze_step", 23}, {"bias_correction", true},
                   {"cuda_aware", false}, {"comm_backend_name", "nccl"}}}}),
        "ds.json");
    const Json& oa = a.experiment["optimizer"];
    CHECK(oa["name"] == "onebit_adam");
    CHECK(oa["freeze_step"] == 23);
    CHECK(oa["bias_correction"] == false);  // OnebitAdam never applies it
    CHECK(has_line(a.notes, "never applies it"));
    CHECK(has_line(a.ignored, "optimizer.params.comm_backend_name: "));
    CHECK(has_line(a.ignored, "optimizer.params.cuda_aware: "));
    CHECK(resolved(a).optimizer["freeze_step"] == 23);

    const auto z = map_deepspeed_config(
        ds_with({{"type", "ZeroOneAdam"}, {"params", {{"var_freeze_step", 40}, {"local_step_clipper", 8}}}}),
        "ds.json");
    const Json& oz = z.experiment["optimizer"];
    CHECK(oz["name"] == "zero_one_adam");
    CHECK(oz["var_freeze_step"] == 40);
    CHECK(oz["var_update_scaler"] == 16);
    CHECK(oz["local_step_scaler"] == 32678);  // DeepSpeed's default as written
    CHECK(oz["local_step_clipper"] == 8);
    CHECK(oz["bias_correction"] == false);
    CHECK(resolved(z).optimizer["local_step_scaler"] == 32678);

    const auto l = map_deepspeed_config(
        ds_with({{"type", "onebitlamb"},
                 {"params", {{"factor_max", 3.0}, {"factor_threshold", 0.2}, {"coeff_beta", 0.8}}}}),
        "ds.json");
    const Json& ol = l.experiment["optimizer"];
    CHECK(ol["name"] == "onebit_lamb");
    CHECK(ol["freeze_step"] == 100000);  // DeepSpeed's default, with a note
    CHECK(has_line(l.notes, "freeze_step not given: DeepSpeed's default 100000"));
    CHECK(ol["factor_max"] == 3.0);
    CHECK(ol["factor_min"] == 0.5);
    CHECK(ol["factor_threshold"] == 0.2);
    CHECK(ol["coeff_beta"] == 0.8);
    CHECK(resolved(l).optimizer["name"] == "onebit_lamb");
    // 1-bit optimizers refuse ZeRO, as DeepSpeed's engine asserts.
    Json zero = ds_with({{"type", "OneBitAdam"}});
    zero["zero_optimization"] = {{"stage", 1}};
    CHECK(error_of(zero).find("ds.json: zero_optimization.stage = 1: OnebitAdam") == 0);
  }

  TEST_CASE("ZeRO-3 quantized gradients with zeropp_loco_param map to loco") {
    Json ds = ds_with({{"type", "AdamW"}, {"params", {{"lr", 3e-4}}}});
    ds["zero_optimization"] = {{"stage", 3},
                               {"zero_quantized_gradients", true},
                               {"zeropp_loco_param", {{"err_beta", 0.7}, {"reset_T", 512}}},
                               {"overlap_comm", true}};
    const auto m = map_deepspeed_config(ds, "ds.json");
    const Json& o = m.experiment["optimizer"];
    CHECK(o["name"] == "loco");
    CHECK(o["base"] == "adam");
    CHECK(o["lr"] == 3e-4);
    CHECK(o["err_beta"] == 0.7);
    CHECK(o["reset_T"] == 512);
    CHECK(!o.contains("wire"));
    // The ZeRO fields are read into the experiment's "zero" section.
    CHECK(m.experiment["zero"] == Json{{"stage", 3}, {"zero_quantized_gradients", true},
                                       {"overlap_comm", true}});
    CHECK(resolved(m).optimizer["bits"] == 4);
    // qgZ without LoCo's error feedback is not modeled; LoCo needs both keys.
    ds["zero_optimization"].erase("zeropp_loco_param");
    CHECK(error_of(ds).find("zero_optimization.zero_quantized_gradients = true: quantized") !=
          std::string::npos);
    ds["zero_optimization"]["zeropp_loco_param"] = {{"err_beta", 0.8}};
    CHECK(error_of(ds).find("zero_optimization.zeropp_loco_param.reset_T = null: missing") !=
          std::string::npos);
    // Below stage 3 DeepSpeed never reads them.
    ds["zero_optimization"]["stage"] = 2;
    const auto s2 = map_deepspeed_config(ds, "ds.json");
    CHECK(s2.experiment["optimizer"]["name"] == "adam");
    CHECK(has_line(s2.ignored, "zero_optimization.zero_quantized_gradients: read only by ZeRO "
                               "stage 3"));
  }

  TEST_CASE("zero_optimization is read into the zero section; bad values name the field") {
    Json ds = ds_with({{"type", "Adam"}});
    ds["zero_optimization"] = {{"stage", 3},
                               {"reduce_bucket_size", 5e7},
                               {"allgather_bucket_size", 2e8},
                               {"zero_quantized_weights", true},
                               {"zero_hpz_partition_size", 8},
                               {"stage3_prefetch_bucket_size", 5e7}};
    const auto m = map_deepspeed_config(ds, "ds.json");
    const Json& z = m.experiment["zero"];
    CHECK(z["stage"] == 3);
    CHECK(z["reduce_bucket_size"] == 5e7);
    CHECK(z["zero_quantized_weights"] == true);
    CHECK(z["zero_hpz_partition_size"] == 8);
    CHECK(!z.contains("stage3_prefetch_bucket_size"));
    CHECK(has_line(m.ignored, "zero_optimization.stage3_prefetch_bucket_size: "));
    CHECK(!has_line(m.ignored, "zero_optimization.stage:"));
    // Resolved with DeepSpeed's defaults (overlap_comm: true at stage 3).
    const Json rz = resolved(m).resolved["zero"];
    CHECK(rz["overlap_comm"] == true);
    CHECK(rz["reduce_bucket_size"] == 50000000);
    // ZeRO++ below stage 3: DeepSpeed never reads it, nor does bitlab.
    ds["zero_optimization"]["stage"] = 2;
    const auto s2 = map_deepspeed_config(ds, "ds.json");
    CHECK(!s2.experiment["zero"].contains("zero_quantized_weights"));
    CHECK(has_line(s2.ignored, "zero_optimization.zero_hpz_partition_size: read only by ZeRO "
                               "stage 3"));
    CHECK(resolved(s2).resolved["zero"]["overlap_comm"] == false);
    // Bad values: the DeepSpeed field, the value, bitlab's rule.
    ds["zero_optimization"]["stage"] = 3;
    ds["zero_optimization"]["zero_hpz_partition_size"] = 0;
    CHECK(error_of(ds).find("ds.json: zero_optimization.zero_hpz_partition_size = 0: bitlab's "
                            "zero.zero_hpz_partition_size = 0: must be >= 1") == 0);
    ds["zero_optimization"]["zero_hpz_partition_size"] = 1;
    ds["zero_optimization"]["reduce_bucket_size"] = -1;
    CHECK(error_of(ds).find("zero_optimization.reduce_bucket_size = -1") != std::string::npos);
  }

  TEST_CASE("batch fields: world size derived, accumulation folded in, inconsistency refused") {
    const auto m = map_deepspeed_config(ds_with(nullptr), "ds.json");
    CHECK(m.experiment["cluster"]["batch_size"] == 16);  // micro 8 × accumulation 2
    CHECK(m.experiment["cluster"]["workers"] == 4);      // 64 / 16
    CHECK(has_line(m.notes, "folded into the worker's batch"));
    CHECK(!m.experiment.contains("optimizer"));

    Json bad = ds_with(nullptr);
    bad["train_batch_size"] = 60;
    const std::string msg = error_of(bad);
    CHECK(msg.find("ds.json: train_batch_size = 60: must equal train_micro_batch_size_per_gpu "
                   "× gradient_accumulation_steps × world size") == 0);
    bad["train_batch_size"] = "auto";  // a Hugging Face template, not a DeepSpeed config
    CHECK(error_of(bad).find("ds.json: train_batch_size = \"auto\": \"auto\" is filled in by "
                             "the Hugging Face Trainer") == 0);
    bad["train_batch_size"] = 0;
    CHECK(error_of(bad) == "ds.json: train_batch_size = 0: must be a positive integer");
    CHECK(error_of(Json{{"gradient_accumulation_steps", 2}})
              .find("either train_batch_size or train_micro_batch_size_per_gpu") !=
          std::string::npos);

    // train and micro alone: accumulation taken as 1 (the same global batch).
    const auto tm = map_deepspeed_config(
        Json{{"train_batch_size", 4096}, {"train_micro_batch_size_per_gpu", 16}}, "ds.json");
    CHECK(tm.experiment["cluster"]["workers"] == 256);
    CHECK(tm.experiment["cluster"]["batch_size"] == 16);
    // micro alone: the workers come from the experiment.
    const auto mo = map_deepspeed_config(Json{{"train_micro_batch_size_per_gpu", 4}}, "ds.json");
    CHECK(mo.experiment["cluster"] == Json{{"batch_size", 4}});
  }

  TEST_CASE("unknown fields, params and types are refused naming the field and the rule") {
    Json top = ds_with(nullptr);
    top["stpes_per_print"] = 10;
    const std::string t = error_of(top);
    CHECK(t.find("ds.json: stpes_per_print = 10: unknown field; did you mean "
                 "\"steps_per_print\"? (known: ") == 0);

    const std::string p =
        error_of(ds_with({{"type", "OneBitAdam"}, {"params", {{"freeze_stp", 100}}}}));
    CHECK(p.find("ds.json: optimizer.params.freeze_stp = 100: unknown field; did you mean "
                 "\"freeze_step\"? (known: lr, betas,") == 0);

    const std::string ty = error_of(ds_with({{"type", "Adagrad"}}));
    CHECK(ty.find("ds.json: optimizer.type = \"Adagrad\": unsupported optimizer type") == 0);

    CHECK(error_of(ds_with({{"type", "Adam"}, {"params", {{"max_grad_norm", 1.0}}}}))
              .find("optimizer.params.max_grad_norm = 1.0: DeepSpeed refuses it") !=
          std::string::npos);
    // bitlab's own rules, reported at the DeepSpeed field.
    CHECK(error_of(ds_with({{"type", "Adam"}, {"params", {{"betas", {1.5, 0.9}}}}})) ==
          "ds.json: optimizer.params.betas = [1.5,0.9]: bitlab's optimizer.beta1 = 1.5: must be "
          "in [0, 1)");
    CHECK(error_of(ds_with({{"type", "Adam"}, {"params", {{"lr", "fast"}}}})) ==
          "ds.json: optimizer.params.lr = \"fast\": must be a number");
    Json zero = ds_with(nullptr);
    zero["zero_optimization"] = {{"stage", 2}, {"overlap_com", true}};
    CHECK(error_of(zero).find("zero_optimization.overlap_com = true: unknown field; did you mean "
                              "\"overlap_comm\"?") != std::string::npos);
  }

  TEST_CASE("ignored fields are listed with why; fp16 sets the allreduce's type") {
    Json ds = ds_with({{"type", "OneBitAdam"}});
    ds["fp16"] = {{"enabled", true}, {"loss_scale", 0}};
    ds["gradient_clipping"] = 1.0;
    ds["scheduler"] = {{"type", "WarmupLR"}};
    ds["steps_per_print"] = 100;
    ds["wall_clock_breakdown"] = false;
    const auto m = map_deepspeed_config(ds, "ds.json");
    CHECK(has_line(m.ignored, "fp16: NOT modeled"));
    CHECK(has_line(m.ignored, "gradient_clipping: NOT applied"));
    CHECK(has_line(m.ignored, "scheduler: NOT applied: the learning-rate schedule"));
    CHECK(has_line(m.ignored, "steps_per_print: "));
    CHECK(has_line(m.ignored, "wall_clock_breakdown: "));
    CHECK(m.experiment["optimizer"]["wire"] == "fp16");
    ds["communication_data_type"] = "FP32";
    CHECK(map_deepspeed_config(ds, "ds.json").experiment["optimizer"]["wire"] == "fp32");
    ds["bf16"] = {{"enabled", true}};
    CHECK(error_of(ds).find("fp16 and bf16 cannot both be enabled") != std::string::npos);
  }

  TEST_CASE("an experiment file's deepspeed_config: merged under its own keys") {
    TempDir dir;
    dir.file("cfg/ds_config.json", R"({
      "train_batch_size": 32, "train_micro_batch_size_per_gpu": 4,
      "gradient_accumulation_steps": 2, "steps_per_print": 10,
      "optimizer": {"type": "OneBitAdam", "params": {"lr": 1e-3, "freeze_step": 5}}
    })");
    const std::string exp = dir.file("exp/run.json", R"({
      "name": "dsrun", "steps": 12, "deepspeed_config": "../cfg/ds_config.json",
      "problem": {"name": "logistic", "dim": 8, "samples": 256},
      "optimizer": {"lr": 0.02}
    })");
    const Experiment e = load_experiment(exp, {});
    CHECK(e.optimizer["name"] == "onebit_adam");
    CHECK(e.optimizer["lr"] == 0.02);  // the experiment's own key wins
    CHECK(e.optimizer["freeze_step"] == 5);
    CHECK(e.cluster.workers == 4);
    CHECK(e.cluster.batch_size.samples == 8);
    CHECK(has_line(e.notes, "ds_config.json: ignored steps_per_print: "));
    CHECK(has_line(e.notes, "read from DeepSpeed config"));
    CHECK(!e.resolved.contains("deepspeed_config"));
    // The resolved config re-runs as it is.
    CHECK(resolve_experiment(e.resolved, "again").resolved == e.resolved);

    // A missing file names its path; so does a bad one.
    dir.file("exp/missing.json", R"({"deepspeed_config": "nope.json",
      "problem": {"name": "logistic"}})");
    try {
      load_experiment((dir.path / "exp/missing.json").string(), {});
      FAIL("a missing DeepSpeed config must be refused");
    } catch (const ConfigError& err) {
      const std::string what = err.what();
      CHECK(what.find("deepspeed_config = \"nope.json\": ") != std::string::npos);
      CHECK(what.find("exp/nope.json: no such file") != std::string::npos);
    }
    dir.file("exp/bad_ds.json", R"({"train_batch_size": 8, "fp32": {}})");
    dir.file("exp/bad.json", R"({"deepspeed_config": "bad_ds.json",
      "problem": {"name": "logistic"}})");
    CHECK_THROWS_WITH_AS(load_experiment((dir.path / "exp/bad.json").string(), {}),
                         doctest::Contains("bad_ds.json: fp32 = {}: unknown field"), ConfigError);
  }

  TEST_CASE("bitlab validate --print and run read an experiment with deepspeed_config") {
    TempDir dir;
    dir.file("ds_config.json", R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4,
      "gradient_clipping": 1.0, "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})");
    dir.file("exp.json", R"({"name": "dscli", "steps": 5, "deepspeed_config": "ds_config.json",
      "problem": {"name": "logistic", "dim": 8, "samples": 128}})");
    const auto v = bitlab::testing::run_bitlab(dir, "validate " + (dir.path / "exp.json").string() + " --print");
    CHECK(v.status == 0);
    CHECK(v.out.find("\"workers\": 4") != std::string::npos);
    const auto r = bitlab::testing::run_bitlab(
        dir, "run " + (dir.path / "exp.json").string() + " --out " + (dir.path / "res").string());
    CHECK(r.status == 0);
    CHECK(r.err.find("bitlab: warning: ") != std::string::npos);
    CHECK(r.err.find("gradient_clipping: NOT applied") != std::string::npos);
    const Json summary = load_json_file((dir.path / "res" / "summary.json").string());
    CHECK(summary["warnings"].dump().find("gradient_clipping: NOT applied") != std::string::npos);
    // The saved config.json re-runs without the DeepSpeed file.
    const Json saved = load_json_file((dir.path / "res" / "config.json").string());
    CHECK(!saved.contains("deepspeed_config"));
    CHECK(saved["cluster"]["workers"] == 4);
  }
}
