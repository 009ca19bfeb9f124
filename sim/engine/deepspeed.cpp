// DeepSpeed config -> bitlab experiment fragment (deepspeed.hpp;
// docs/deepspeed.md). The facts cited are DeepSpeed's, read from
// microsoft/DeepSpeed: deepspeed/runtime/config.py (DeepSpeedConfig),
// deepspeed/runtime/engine.py (DeepSpeedEngine), the optimizers'
// constructors, deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig).
#include "sim/engine/deepspeed.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <string_view>
#include <utility>

#include "optimizers/optimizer.hpp"
#include "sim/core/field_error.hpp"
#include "sim/engine/deepspeed_auto.hpp"
#include "sim/engine/json_input.hpp"
#include "sim/timing/zero.hpp"

namespace bitlab {

namespace {

// Collects the mapping and puts `source` in front of every error.
class Mapper {
 public:
  explicit Mapper(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& path, const Json& value,
                         const std::string& rule) const {
    // Hugging Face's Trainer fills "auto" in before DeepSpeed sees the file.
    const std::string hint = value == Json("auto")
                                 ? " (\"auto\" is filled in by the Hugging Face Trainer, not "
                                   "DeepSpeed: give the value)"
                                 : "";
    const std::string shown = show_value(value);
    throw FieldError(source_ + ": " + path + " = " + shown + ": " + rule + hint, path, shown,
                     rule + hint);
  }
  void ignore(const std::string& path, const std::string& why) {
    out_.ignored.push_back(path + ": " + why);
  }
  void note(const std::string& text) { out_.notes.push_back(text); }
  // Remembers which DeepSpeed field a bitlab optimizer option came from, so a
  // value bitlab's schema refuses is reported at the DeepSpeed field.
  void origin(const std::string& option, const std::string& path, const Json& value) {
    origins_[option] = {path, value};
  }
  const std::pair<std::string, Json>* origin_of(const std::string& option) const {
    auto it = origins_.find(option);
    return it == origins_.end() ? nullptr : &it->second;
  }
  const std::string& source() const { return source_; }
  DeepSpeedMapping& out() { return out_; }

 private:
  std::string source_;
  DeepSpeedMapping out_;
  std::map<std::string, std::pair<std::string, Json>> origins_;
};

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Refuses every key of `obj` not in `known`, naming the closest known key.
void refuse_unknown(const Json& obj, const std::string& path,
                    const std::vector<std::string>& known, const Mapper& m) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    std::string rule = "unknown field";
    const std::string close = closest_match(it.key(), known);
    if (!close.empty()) rule += "; did you mean \"" + close + "\"?";
    m.fail(join_path(path, it.key()), it.value(), rule + " (known: " + joined(known) + ")");
  }
}

const Json& object_at(const Json& parent, const std::string& key, const std::string& path,
                      const Mapper& m) {
  const Json& v = parent.at(key);
  if (!v.is_object()) m.fail(path, v, "must be a JSON object");
  return v;
}

int64_t positive_int(const Json& v, const std::string& path, const Mapper& m) {
  if (!v.is_number_integer() || v.get<int64_t>() < 1 ||
      (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 40))) {
    m.fail(path, v, "must be a positive integer");
  }
  return v.get<int64_t>();
}

bool flag(const Json& v, const std::string& path, const Mapper& m) {
  if (!v.is_boolean()) m.fail(path, v, "must be true or false");
  return v.get<bool>();
}

bool enabled(const Json& ds, const std::string& key, const Mapper& m) {
  if (!ds.contains(key)) return false;
  const Json& section = object_at(ds, key, key, m);
  return section.contains("enabled") && flag(section["enabled"], key + ".enabled", m);
}

// ---- top-level fields bitlab does not model --------------------------------

struct IgnoredField {
  std::string_view name;
  std::string_view why;
};

// Every other top-level key DeepSpeedConfig._initialize_params reads
// (deepspeed/runtime/config.py), with why a simulator has nothing to do with
// it. The mapped keys are in kMappedFields.
constexpr IgnoredField kIgnoredFields[] = {
    {"steps_per_print", "logging only"},
    {"wall_clock_breakdown", "timing printout; bitlab's time comes from its network model"},
    {"memory_breakdown", "memory printout; bitlab reports its own peak memory"},
    {"dump_state", "prints the engine state"},
    {"prescale_gradients",
     "where the allreduce divides by the world size: the same mean up to rounding"},
    {"gradient_predivide_factor", "splits that division before/after the sum: the same mean "
                                  "up to rounding"},
    {"sparse_gradients", "CSR allreduce of embedding gradients: the same mean, other bytes"},
    {"disable_allgather", "a ZeRO transport choice"},
    {"zero_allow_untested_optimizer", "a guard on ZeRO with client optimizers"},
    {"zero_force_ds_cpu_optimizer", "picks DeepSpeed's CPU optimizer under offload"},
    {"aio", "NVMe offload I/O"},
    {"autotuning", "searches DeepSpeed settings for throughput"},
    {"flops_profiler", "profiling"},
    {"activation_checkpointing", "recomputes activations to save memory: the same gradients"},
    {"sparse_attention", "changes the model; in bitlab the problem defines the model"},
    {"data_efficiency",
     "data sampling and routing (curriculum, random-LTD): bitlab's sampler draws the batches"},
    {"curriculum_learning", "legacy curriculum: bitlab's sampler draws the batches"},
    {"tensorboard", "monitoring; bitlab writes metrics.csv"},
    {"wandb", "monitoring; bitlab writes metrics.csv"},
    {"comet", "monitoring; bitlab writes metrics.csv"},
    {"csv_monitor", "monitoring; bitlab writes metrics.csv"},
    {"comms_logger", "bitlab logs every collective in comm_log.csv"},
    {"elasticity",
     "NOT applied: it would rewrite the batch fields for a changing GPU count; they are read "
     "as written"},
    {"compression_training", "NOT modeled: model compression (quantization-aware training, "
                             "pruning) changes the model"},
    {"weight_quantization", "inference weight quantization"},
    {"quantize_training", "NOT modeled: MoQ quantizes the weights during training"},
    {"checkpoint", "checkpoint files; bitlab has --checkpoint-every"},
    {"data_types",
     "grad_accum_dtype: bitlab folds accumulation into the worker's batch, in fp32"},
    {"dataloader_drop_last", "bitlab's sampler draws the batches"},
    {"eigenvalue", "MoQ's eigenvalue schedule"},
    {"progressive_layer_drop", "NOT modeled: it changes the forward pass"},
    {"pipeline", "pipeline parallelism; bitlab's workers are data-parallel"},
    {"hybrid_engine", "RLHF generation"},
    {"nebula", "checkpoint service"},
    {"timers", "timing"},
    {"tensor_parallel", "tensor parallelism; bitlab's workers are data-parallel"},
    {"graph_harvesting", "CUDA graphs: the same arithmetic"},
    {"use_data_before_expert_parallelism", "mixture-of-experts process groups"},
    {"seq_parallel_comm_data_type", "sequence parallelism"},
    {"vocabulary_size", "a model size hint"},
    {"amp", "NOT modeled: NVIDIA Apex mixed precision; bitlab computes in fp32"},
};

constexpr std::string_view kMappedFields[] = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "optimizer",        "zero_optimization",              "fp16",
    "bf16",             "bfloat16",                       "communication_data_type",
    "gradient_clipping", "scheduler"};

std::vector<std::string> known_top_level() {
  std::vector<std::string> known;
  for (auto k : kMappedFields) known.emplace_back(k);
  for (const auto& f : kIgnoredFields) known.emplace_back(f.name);
  return known;
}

// The fields listed above, plus the two whose warning depends on the value.
void list_ignored_fields(const Json& ds, Mapper& m) {
  for (const auto& f : kIgnoredFields) {
    if (ds.contains(std::string(f.name))) m.ignore(std::string(f.name), std::string(f.why));
  }
  if (ds.contains("gradient_clipping")) {
    const Json& v = ds["gradient_clipping"];
    if (!v.is_number() || v.get<double>() < 0.0) {
      m.fail("gradient_clipping", v, "must be a number >= 0");
    }
    m.ignore("gradient_clipping",
             v.get<double>() == 0.0
                 ? "0: no clipping, nothing to apply"
                 : "NOT applied: bitlab does not clip the gradient norm, so its steps differ "
                   "from DeepSpeed's whenever the global norm exceeds " +
                       show_value(v));
  }
  if (ds.contains("scheduler")) {
    m.ignore("scheduler",
             "NOT applied: the learning-rate schedule is not modeled; bitlab runs at the "
             "constant optimizer.lr (DeepSpeed's optimizer.params.lr)");
  }
}

// ---- precision and the gradient allreduce's element type --------------------

// DeepSpeed's DeepSpeedEngine.communication_data_type (engine.py): the
// explicit communication_data_type, else fp16 / bf16 when that mode is on,
// else fp32. It is bitlab's optimizer "wire".
std::string map_precision(const Json& ds, Mapper& m) {
  const bool fp16 = enabled(ds, "fp16", m);
  std::string bf16_key = ds.contains("bf16") ? "bf16" : "bfloat16";  // config.py BFLOAT16_OLD
  const bool bf16 = enabled(ds, bf16_key, m);
  if (fp16 && bf16) {
    m.fail("bf16.enabled", Json(true),
           "fp16 and bf16 cannot both be enabled (DeepSpeedConfig._initialize_params)");
  }
  for (const std::string key : {"fp16", "bf16", "bfloat16"}) {
    if (!ds.contains(key)) continue;
    m.ignore(key, enabled(ds, key, m)
                      ? "NOT modeled: half-precision forward/backward, fp32 master weights and "
                        "loss scaling (with its skipped steps) are not simulated; bitlab "
                        "computes in fp32 (only the allreduce's element type follows it)"
                      : "not enabled");
  }
  if (ds.contains("communication_data_type")) {
    const Json& v = ds["communication_data_type"];
    std::string t = v.is_string() ? v.get<std::string>() : "";
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t != "fp32" && t != "fp16" && t != "bf16") {
      m.fail("communication_data_type", v, "must be one of \"fp16\", \"bf16\", \"fp32\"");
    }
    m.origin("wire", "communication_data_type", v);
    return t;
  }
  if (fp16 || bf16) {
    const std::string t = fp16 ? "fp16" : "bf16";
    m.note(t + " enabled: the gradient allreduce runs in " + t +
           " (optimizer.wire), as DeepSpeed's engine.communication_data_type does");
    m.origin("wire", fp16 ? "fp16.enabled" : bf16_key + ".enabled", Json(true));
    return t;
  }
  return "fp32";
}

// ---- batch sizes -----------------------------------------------------------

// DeepSpeedConfig._set_batch_related_parameters and _batch_assertion
// (config.py): train = micro × accumulation × world size. The world size is
// not in the file: the caller may give it (Simulation's workers=); else it is
// derived when train and micro are given. Sets the
// experiment's cluster section, and compute.gradient_accumulation_steps
// when it is above 1 (the time model's micro-steps).
void map_batch(const Json& ds, Mapper& m, Json& experiment, std::optional<int64_t> world) {
  Json& cluster = experiment["cluster"] = Json::object();
  auto get = [&](const char* key) -> int64_t {
    return ds.contains(key) ? positive_int(ds[key], key, m) : 0;
  };
  const int64_t train = get("train_batch_size");
  const int64_t micro = get("train_micro_batch_size_per_gpu");
  int64_t accum = get("gradient_accumulation_steps");
  if (train == 0 && micro == 0) {
    m.fail("train_batch_size", Json(nullptr),
           "either train_batch_size or train_micro_batch_size_per_gpu must be given "
           "(DeepSpeedConfig._set_batch_related_parameters)");
  }
  const std::string given = world ? "cluster.workers = " + std::to_string(*world) + " (given)" : "";
  if (micro == 0) {
    if (world && train % *world == 0) {
      cluster["batch_size"] = train / *world;
      cluster["workers"] = *world;
      m.note("train_batch_size without train_micro_batch_size_per_gpu: with " + given +
             ", cluster.batch_size = train_batch_size / workers = " +
             std::to_string(train / *world));
      return;
    }
    m.note("train_batch_size without train_micro_batch_size_per_gpu: the per-worker batch "
           "depends on the world size, which a DeepSpeed config does not hold; set "
           "cluster.workers × cluster.batch_size = " +
           std::to_string(train) + " in the experiment");
    return;
  }
  if (accum == 0 && train == 0) accum = 1;  // DeepSpeed's rule for micro alone
  if (accum == 0 && world && train % (micro * *world) == 0) {
    // DeepSpeed's own rule, with the world size given: train / (micro × world).
    accum = train / (micro * *world);
    m.note("gradient_accumulation_steps not given: with " + given +
           ", train_batch_size / (train_micro_batch_size_per_gpu × workers) = " +
           std::to_string(accum) + " (DeepSpeedConfig._set_batch_related_parameters)");
  }
  if (accum == 0) {
    // train and micro: DeepSpeed derives accumulation from its world size.
    // Taking 1 keeps the global batch: world = train / micro.
    accum = 1;
    if (train % micro != 0) {
      m.fail("train_batch_size", Json(train),
             "must be a multiple of train_micro_batch_size_per_gpu (" + std::to_string(micro) +
                 ")");
    }
    m.note("gradient_accumulation_steps not given: taken as 1, so cluster.workers = "
           "train_batch_size / train_micro_batch_size_per_gpu = " +
           std::to_string(train / micro) + " (the same global batch)" +
           (world ? "; the " + given + " replaces it, so the global batch is " +
                        std::to_string(micro * *world) + ", not " + std::to_string(train)
                  : ""));
  }
  const int64_t per_worker = micro * accum;
  cluster["batch_size"] = per_worker;
  if (train > 0) {
    if (train % per_worker != 0) {
      m.fail("train_batch_size", Json(train),
             "must equal train_micro_batch_size_per_gpu × gradient_accumulation_steps × world "
             "size (DeepSpeedConfig._batch_assertion), so a multiple of " +
                 std::to_string(micro) + " × " + std::to_string(accum) + " = " +
                 std::to_string(per_worker));
    }
    cluster["workers"] = world ? *world : train / per_worker;
    if (world && ds.contains("gradient_accumulation_steps") && train != per_worker * *world) {
      m.note("train_batch_size = " + std::to_string(train) +
             " is not micro × accumulation × workers with " + given +
             " (DeepSpeedConfig._batch_assertion would refuse it): the run's global batch is " +
             std::to_string(per_worker * *world));
    }
  } else if (world) {
    cluster["workers"] = *world;
  } else {
    m.note("train_batch_size not given: the world size is not in the config, so "
           "cluster.workers comes from the experiment (default 1)");
  }
  if (accum > 1) {
    experiment["compute"]["gradient_accumulation_steps"] = accum;
    m.note("gradient_accumulation_steps = " + std::to_string(accum) +
           " is folded into the worker's batch (cluster.batch_size = micro × accumulation = " +
           std::to_string(per_worker) +
           "): mathematically the same mean gradient, not bit-identical to accumulating; the "
           "time model prices each step as that many micro-steps of compute and one exchange "
           "(compute.gradient_accumulation_steps)");
  }
}

// ---- optimizer -------------------------------------------------------------

// How one DeepSpeed optimizer parameter is read.
enum class Param {
  kSame,             // a bitlab option of the same name and meaning
  kBetas,            // [beta1, beta2]
  kBiasCorrection,   // bias_correction (the 1-bit family never applies it)
  kAmsgrad,          // refused when true
  kAdamWMode,        // Adam: decoupled (AdamW) or L2 weight decay
  kTorchAdam,        // Adam: torch.optim instead of FusedAdam
  kFusedOnly,        // FusedAdam's own keyword (torch.optim.Adam has none)
  kTorchOnly,        // torch.optim.Adam's own keyword (FusedAdam has none)
  kMaximize,         // torch.optim: refused when true
  kEpsInsideSqrt,    // Lamb: refused when true; 1-bit family: never read
  kBackend,          // cuda_aware, comm_backend_name: the transport
};

struct OptimizerType {
  std::string_view ds_name;  // lower case, as DeepSpeedConfig compares
  std::string_view where;    // DeepSpeed's class and file
  std::string_view bitlab;   // bitlab optimizer
  bool onebit;               // the 1-bit family: no ZeRO, no bias correction
  std::vector<std::pair<std::string_view, Param>> params;
  Json defaults;  // DeepSpeed's constructor defaults, in bitlab's names
};

std::vector<std::pair<std::string_view, Param>> adam_core_params() {
  return {{"lr", Param::kSame},           {"betas", Param::kBetas},
          {"eps", Param::kSame},          {"weight_decay", Param::kSame},
          {"bias_correction", Param::kBiasCorrection}, {"amsgrad", Param::kAmsgrad}};
}

std::vector<std::pair<std::string_view, Param>> with(
    std::vector<std::pair<std::string_view, Param>> params,
    std::vector<std::pair<std::string_view, Param>> more) {
  params.insert(params.end(), more.begin(), more.end());
  return params;
}

const std::vector<OptimizerType>& optimizer_types() {
  static const std::vector<OptimizerType> types = [] {
    const Json core = {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8},
                       {"weight_decay", 0.0}};
    auto defaults = [&](Json more) {
      Json d = core;
      d.update(more);
      return d;
    };
    const std::vector<std::pair<std::string_view, Param>> adam = with(
        adam_core_params(),
        {{"adam_w_mode", Param::kAdamWMode}, {"torch_adam", Param::kTorchAdam},
         {"set_grad_none", Param::kFusedOnly}, {"fused", Param::kTorchOnly},
         {"foreach", Param::kTorchOnly}, {"capturable", Param::kTorchOnly},
         {"differentiable", Param::kTorchOnly}, {"maximize", Param::kMaximize}});
    const std::vector<std::pair<std::string_view, Param>> onebit =
        with(adam_core_params(), {{"eps_inside_sqrt", Param::kEpsInsideSqrt},
                                  {"cuda_aware", Param::kBackend},
                                  {"comm_backend_name", Param::kBackend}});
    const std::vector<std::pair<std::string_view, Param>> lamb_coeffs = {
        {"max_coeff", Param::kSame}, {"min_coeff", Param::kSame}};
    return std::vector<OptimizerType>{
        {"adam", "FusedAdam (deepspeed/ops/adam/fused_adam.py)", "adam", false, adam,
         defaults({{"bias_correction", true}})},
        {"adamw", "FusedAdam (deepspeed/ops/adam/fused_adam.py)", "adam", false, adam,
         defaults({{"bias_correction", true}})},
        {"lamb", "FusedLamb (deepspeed/ops/lamb/fused_lamb.py)", "lamb", false,
         with(with(adam_core_params(), lamb_coeffs), {{"eps_inside_sqrt", Param::kEpsInsideSqrt}}),
         defaults({{"bias_correction", true}, {"max_coeff", 10.0}, {"min_coeff", 0.01}})},
        {"onebitadam", "OnebitAdam (deepspeed/runtime/fp16/onebit/adam.py)", "onebit_adam", true,
         with(onebit, {{"freeze_step", Param::kSame}}),
         defaults({{"bias_correction", false}, {"freeze_step", 100000}})},
        {"zerooneadam", "ZeroOneAdam (deepspeed/runtime/fp16/onebit/zoadam.py)",
         "zero_one_adam", true,
         with(onebit, {{"var_freeze_step", Param::kSame}, {"var_update_scaler", Param::kSame},
                       {"local_step_scaler", Param::kSame}, {"local_step_clipper", Param::kSame}}),
         defaults({{"bias_correction", false}, {"var_freeze_step", 100000},
                   {"var_update_scaler", 16}, {"local_step_scaler", 32678},
                   {"local_step_clipper", 16}})},
        {"onebitlamb", "OnebitLamb (deepspeed/runtime/fp16/onebit/lamb.py)", "onebit_lamb", true,
         with(with(onebit, lamb_coeffs),
              {{"freeze_step", Param::kSame}, {"coeff_beta", Param::kSame},
               {"factor_max", Param::kSame}, {"factor_min", Param::kSame},
               {"factor_threshold", Param::kSame}}),
         defaults({{"bias_correction", false}, {"freeze_step", 100000}, {"max_coeff", 10.0},
                   {"min_coeff", 0.01}, {"coeff_beta", 0.9}, {"factor_max", 4.0},
                   {"factor_min", 0.5}, {"factor_threshold", 0.1}})},
    };
  }();
  return types;
}

// What the Adam parameters that choose an implementation said.
struct AdamChoices {
  bool adam_w_mode = true;  // engine.py ADAM_W_MODE_DEFAULT
  bool torch_adam = false;
  // (path, value) of the keywords only one implementation takes
  std::vector<std::pair<std::string, Json>> fused_only, torch_only;
};

void map_number_param(const OptimizerType& type, const std::string& name, const Json& v,
                      const std::string& path, Json& opt, Mapper& m) {
  if (!v.is_number()) m.fail(path, v, "must be a number");
  const bool integral = type.defaults.contains(name) && type.defaults[name].is_number_integer();
  if (integral && !v.is_number_integer() && v.get<double>() != std::floor(v.get<double>())) {
    m.fail(path, v, "must be a whole number");
  }
  opt[name] = v;
  m.origin(name, path, v);
}

void map_param(const OptimizerType& type, const std::string& name, Param kind, const Json& v,
               const std::string& path, Json& opt, AdamChoices& adam, Mapper& m) {
  switch (kind) {
    case Param::kSame:
      return map_number_param(type, name, v, path, opt, m);
    case Param::kBetas:
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number()) {
        m.fail(path, v, "must be a list of two numbers [beta1, beta2]");
      }
      opt["beta1"] = v[0];
      opt["beta2"] = v[1];
      m.origin("beta1", path, v);
      m.origin("beta2", path, v);
      return;
    case Param::kBiasCorrection:
      if (!type.onebit) {
        opt["bias_correction"] = flag(v, path, m);
        m.origin("bias_correction", path, v);
      } else if (flag(v, path, m)) {
        // OnebitAdam.step (and zoadam.py, lamb.py) compute `bias_correction`
        // from the flag and never use it.
        m.note(std::string(path) + " = true: " + std::string(type.where) +
               " reads the flag and never applies it, so bitlab runs bias_correction = false");
      }
      return;
    case Param::kAmsgrad:
      if (flag(v, path, m)) {
        m.fail(path, v, "AMSGrad is not supported: " + std::string(type.where) +
                            " raises RuntimeError, and bitlab has no AMSGrad");
      }
      return;
    case Param::kAdamWMode:
      adam.adam_w_mode = flag(v, path, m);
      return;
    case Param::kTorchAdam:
      adam.torch_adam = flag(v, path, m);
      m.ignore(path, "picks torch.optim.Adam(W) or FusedAdam: the same update within float "
                     "rounding (optimizers/adam.hpp)");
      return;
    case Param::kFusedOnly:
    case Param::kTorchOnly:
      (kind == Param::kFusedOnly ? adam.fused_only : adam.torch_only).emplace_back(path, v);
      m.ignore(path, "an implementation setting: the same update");
      return;
    case Param::kMaximize:
      if (flag(v, path, m)) m.fail(path, v, "bitlab's optimizers minimise the loss");
      adam.torch_only.emplace_back(path, v);
      m.ignore(path, "false: minimise, as bitlab does");
      return;
    case Param::kEpsInsideSqrt:
      if (!type.onebit) {
        if (flag(v, path, m)) {
          m.fail(path, v, "bitlab adds ε outside the square root, as FusedLamb's default does");
        }
        return;
      }
      flag(v, path, m);
      m.ignore(path, "stored as eps_mode and never read by " + std::string(type.where) +
                         "'s step: ε is added outside the square root");
      return;
    case Param::kBackend:
      if (name == "comm_backend_name") {
        static const std::vector<std::string> backends = {"nccl", "mpi", "hccl", "compressed"};
        if (!v.is_string() ||
            std::find(backends.begin(), backends.end(), v.get<std::string>()) == backends.end()) {
          m.fail(path, v, "must be one of \"nccl\", \"mpi\", \"hccl\", \"compressed\"");
        }
      } else {
        flag(v, path, m);
      }
      m.ignore(path, "the communication backend: the simulator has no transport, its "
                     "communicator counts the bytes");
      return;
  }
}

// Checks what DeepSpeedEngine._configure_basic_optimizer (engine.py) would
// build for Adam/AdamW, once every parameter is read.
void check_adam_choices(const OptimizerType& type, const Json& opt, const AdamChoices& adam,
                        Mapper& m) {
  const auto& wrong = adam.torch_adam ? adam.fused_only : adam.torch_only;
  if (!wrong.empty()) {
    m.fail(wrong.front().first, wrong.front().second,
           adam.torch_adam ? "torch.optim.Adam(W) takes no such keyword (torch_adam is true)"
                           : "FusedAdam takes no such keyword (torch_adam is false)");
  }
  if (adam.torch_adam && opt.contains("bias_correction") && m.origin_of("bias_correction")) {
    m.fail("optimizer.params.bias_correction", opt["bias_correction"],
           "torch.optim.Adam(W) takes no such keyword (torch_adam is true)");
  }
  // "Optimizer name of Adam forces AdamW logic unless adam_w_mode is
  // explicitly set"; AdamW ignores adam_w_mode = false.
  const bool adamw = type.ds_name == "adamw" || adam.adam_w_mode;
  if (type.ds_name == "adamw" && !adam.adam_w_mode) {
    m.note("optimizer.params.adam_w_mode = false is overridden by type AdamW "
           "(DeepSpeedEngine._configure_basic_optimizer): decoupled weight decay");
  }
  if (!adamw && opt["weight_decay"].get<double>() > 0.0) {
    m.fail("optimizer.params.adam_w_mode", Json(false),
           "with weight_decay > 0 this is Adam with L2 (coupled) weight decay, which bitlab's "
           "adam does not have (its weight decay is decoupled, AdamW)");
  }
}

const OptimizerType& find_type(const Json& type, Mapper& m) {
  if (!type.is_string()) m.fail("optimizer.type", type, "must be a string");
  std::string lower = type.get<std::string>();
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  for (const auto& t : optimizer_types()) {
    if (t.ds_name == lower) return t;
  }
  m.fail("optimizer.type", type,
         "unsupported optimizer type (bitlab maps Adam, AdamW, Lamb, OneBitAdam, ZeroOneAdam, "
         "OneBitLamb; DeepSpeed compares them case-insensitively)");
}

// The optimizer section: type, params (each mapped, ignored or refused) and
// DeepSpeed's defaults for what is not given.
Json map_optimizer(const Json& section, const std::string& wire, const OptimizerType& type,
                   Mapper& m) {
  refuse_unknown(section, "optimizer", {"type", "params", "legacy_fusion"}, m);
  if (section.contains("legacy_fusion")) m.ignore("optimizer.legacy_fusion", "an implementation setting");
  Json opt = type.defaults;
  opt["name"] = std::string(type.bitlab);
  opt["wire"] = wire;
  const Json params = section.contains("params")
                          ? object_at(section, "params", "optimizer.params", m)
                          : Json::object();
  // engine.py _configure_basic_optimizer refuses it for every optimizer.
  if (params.contains("max_grad_norm")) {
    m.fail("optimizer.params.max_grad_norm", params["max_grad_norm"],
           "DeepSpeed refuses it as an optimizer parameter "
           "(DeepSpeedEngine._configure_basic_optimizer); use gradient_clipping");
  }
  std::vector<std::string> known;
  for (const auto& [name, kind] : type.params) known.emplace_back(name);
  refuse_unknown(params, "optimizer.params", known, m);
  AdamChoices adam;
  for (const auto& [name, kind] : type.params) {
    const std::string key(name);
    if (!params.contains(key)) continue;
    map_param(type, key, kind, params[key], "optimizer.params." + key, opt, adam, m);
  }
  if (type.bitlab == "adam") check_adam_choices(type, opt, adam, m);
  for (const char* step : {"freeze_step", "var_freeze_step"}) {
    if (opt.contains(step) && !params.contains(step)) {
      m.note(std::string("optimizer.params.") + step + " not given: DeepSpeed's default " +
             opt[step].dump() + " applies, so a shorter run never leaves the warm-up; set "
             "optimizer." + step + " in the experiment (e.g. \"15%\")");
    }
  }
  if (type.bitlab == "zero_one_adam" && !params.contains("local_step_scaler")) {
    m.note("optimizer.params.local_step_scaler not given: DeepSpeed's default 32678 (sic, "
           "zoadam.py) is kept, not bitlab's 32768");
  }
  return opt;
}

// ---- ZeRO and LoCo ---------------------------------------------------------

// DeepSpeedZeroConfig's fields and aliases (deepspeed/runtime/zero/config.py;
// the model forbids any other key).
const std::vector<std::string>& zero_fields() {
  static const std::vector<std::string> fields = {
      "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size",
      "use_multi_rank_bucket_allreduce", "allgather_partitions", "allgather_bucket_size",
      "overlap_comm", "load_from_fp32_weights", "elastic_checkpoint", "offload_param",
      "offload_optimizer", "sub_group_size", "cpu_offload_param", "cpu_offload_use_pin_memory",
      "cpu_offload", "prefetch_bucket_size", "stage3_prefetch_bucket_size",
      "param_persistence_threshold", "stage3_param_persistence_threshold",
      "model_persistence_threshold", "stage3_model_persistence_threshold", "max_live_parameters",
      "stage3_max_live_parameters", "max_reuse_distance", "stage3_max_reuse_distance",
      "gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save",
      "module_granularity_threshold", "stage3_module_granularity_threshold",
      "use_all_reduce_for_fetch_params", "stage3_use_all_reduce_for_fetch_params",
      "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "legacy_stage1",
      "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
      "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param",
      "mics_shard_size", "mics_hierarchical_params_gather", "memory_efficient_linear",
      "pipeline_loading_checkpoint", "override_module_apply", "log_trace_cache_warnings"};
  return fields;
}

struct ZeroPlan {
  int64_t stage = 0;
  Json loco;  // {"err_beta", "reset_T"} when LoCo is on, else null
  Json zero;  // the experiment's "zero" section (sim/timing/zero.hpp), null without one
};

// The zero_optimization fields bitlab's "zero" section takes as they are
// (the same names; `cost` prices them). ZeRO++'s only at stage 3, which
// alone reads them (DeepSpeedZeroOptimizer_Stage3).
bool zero_section_field(const std::string& key, int64_t stage) {
  if (key == "stage" || key == "reduce_bucket_size" || key == "allgather_bucket_size" ||
      key == "overlap_comm") {
    return true;
  }
  return stage == 3 && (key == "zero_quantized_weights" || key == "zero_hpz_partition_size");
}

// LoCo's two parameters: all_to_all_loco_quant_reduce
// (deepspeed/runtime/comm/coalesced_collectives.py) indexes both.
Json map_loco_param(const Json& zero, Mapper& m) {
  const std::string path = "zero_optimization.zeropp_loco_param";
  if (!zero.contains("zeropp_loco_param") || zero["zeropp_loco_param"].is_null()) {
    m.fail("zero_optimization.zero_quantized_gradients", Json(true),
           "quantized gradients without zeropp_loco_param (ZeRO++ qgZ, no error feedback) are "
           "not modeled; bitlab has LoCo: add \"zeropp_loco_param\": {\"err_beta\": 0.8, "
           "\"reset_T\": 1024}");
  }
  const Json& p = object_at(zero, "zeropp_loco_param", path, m);
  refuse_unknown(p, path, {"err_beta", "reset_T"}, m);
  Json loco = Json::object();
  for (const char* key : {"err_beta", "reset_T"}) {
    const std::string field = join_path(path, key);
    if (!p.contains(key)) {
      m.fail(field, Json(nullptr),
             "missing: DeepSpeed's all_to_all_loco_quant_reduce reads it (its docs suggest "
             "err_beta 0.8, reset_T 1024)");
    }
    if (!p[key].is_number() || (std::string(key) == "reset_T" && !p[key].is_number_integer())) {
      m.fail(field, p[key], std::string(key) == "reset_T" ? "must be an integer" : "must be a number");
    }
    loco[key] = p[key];
    m.origin(key, field, p[key]);
  }
  return loco;
}

ZeroPlan map_zero(const Json& ds, Mapper& m) {
  ZeroPlan plan;
  if (!ds.contains("zero_optimization")) return plan;
  const Json& z = ds["zero_optimization"];
  if (z.is_boolean()) {  // read_zero_config_deprecated: true means stage 1
    plan.stage = z.get<bool>() ? 1 : 0;
    m.ignore("zero_optimization", "stage " + std::to_string(plan.stage) +
                                      " (deprecated boolean form): partitioning only, the same "
                                      "update as data-parallel training");
    plan.zero = {{"stage", plan.stage}};
    return plan;
  }
  const Json& zero = object_at(ds, "zero_optimization", "zero_optimization", m);
  refuse_unknown(zero, "zero_optimization", zero_fields(), m);
  if (zero.contains("stage")) {
    const Json& s = zero["stage"];
    if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > 3) {
      m.fail("zero_optimization.stage", s, "must be 0, 1, 2 or 3");
    }
    plan.stage = s.get<int64_t>();
  }
  const bool quantized = zero.contains("zero_quantized_gradients") &&
                         flag(zero["zero_quantized_gradients"],
                              "zero_optimization.zero_quantized_gradients", m);
  // Only ZeRO stage 3 reduces gradients through LoCo
  // (DeepSpeedZeroOptimizer_Stage3, deepspeed/runtime/zero/stage3.py).
  if (quantized && plan.stage == 3) plan.loco = map_loco_param(zero, m);
  plan.zero = {{"stage", plan.stage}};
  if (!plan.loco.is_null()) plan.zero["zero_quantized_gradients"] = true;
  for (auto it = zero.begin(); it != zero.end(); ++it) {
    const std::string path = "zero_optimization." + it.key();
    if (zero_section_field(it.key(), plan.stage)) {
      // Read into "zero" (validated there, errors at the DeepSpeed field).
      if (!it.value().is_null()) plan.zero[it.key()] = it.value();
      continue;
    }
    if (!plan.loco.is_null() && (it.key() == "zero_quantized_gradients" ||
                                 it.key() == "zeropp_loco_param" || it.key() == "stage")) {
      continue;  // mapped to loco
    }
    if (it.key() == "zero_quantized_gradients" || it.key() == "zeropp_loco_param") {
      m.ignore(path, "read only by ZeRO stage 3 with zero_quantized_gradients on");
    } else if (it.key() == "zero_quantized_weights" || it.key() == "zero_hpz_partition_size") {
      m.ignore(path, "read only by ZeRO stage 3");
    } else {
      m.ignore(path, "offload, prefetch or memory setting: the same update, not priced");
    }
  }
  return plan;
}

// The optimizer wrapped by LoCo: DeepSpeed's Adam/AdamW under ZeRO-3.
Json to_loco(const Json& adam, const ZeroPlan& zero, const OptimizerType& type, Mapper& m) {
  if (type.bitlab != "adam") {
    m.fail("optimizer.type", Json(std::string(type.ds_name)),
           "LoCo (zero_quantized_gradients with zeropp_loco_param) maps to bitlab's loco, "
           "which wraps Adam/AdamW (or momentum SGD), not this optimizer");
  }
  Json loco = {{"name", "loco"}, {"base", "adam"}};
  for (const char* key : {"lr", "beta1", "beta2", "eps", "weight_decay", "bias_correction"}) {
    loco[key] = adam[key];
  }
  loco.update(zero.loco);
  m.note("zero_optimization.zero_quantized_gradients with zeropp_loco_param: bitlab's loco "
         "around adam (4-bit two-stage quantized all-to-all as DeepSpeed's "
         "all_to_all_loco_quant_reduce; workers per node from the network preset or "
         "optimizer.node_size: on one node nothing is compressed, as in DeepSpeed's "
         "stage3.py, which then reduce-scatters in full precision)");
  return loco;
}

// Runs the mapped optimizer through bitlab's own schema, so a value bitlab
// refuses is reported at the DeepSpeed field it came from.
void validate_optimizer(const Json& opt, const Mapper& m) {
  const auto* entry = find_entry(optimizer_registry(), opt["name"].get<std::string>());
  try {
    (void)entry->resolve(opt, "optimizer");
  } catch (const ConfigError& e) {
    const std::string option = e.path().rfind("optimizer.", 0) == 0 ? e.path().substr(10) : "";
    if (const auto* from = m.origin_of(option)) {
      m.fail(from->first, from->second, "bitlab's " + std::string(e.what()));
    }
    rethrow_with_context(e, m.source() + ": ");
  }
}

}  // namespace

DeepSpeedMapping map_deepspeed_config(const Json& ds, const std::string& source,
                                      std::optional<int64_t> workers) {
  Mapper m(source);
  if (!ds.is_object()) m.fail("(config)", ds, "a DeepSpeed config must be a JSON object");
  refuse_unfilled_auto(ds, source);  // every "auto" in one message (deepspeed_auto.hpp)
  refuse_unknown(ds, "", known_top_level(), m);
  list_ignored_fields(ds, m);
  const std::string wire = map_precision(ds, m);
  Json experiment = Json::object();
  map_batch(ds, m, experiment, workers);
  const ZeroPlan zero = map_zero(ds, m);
  if (!zero.zero.is_null()) {
    try {
      (void)read_zero_options(zero.zero, "zero");
    } catch (const ConfigError& e) {
      const std::string field = e.path().rfind("zero.", 0) == 0 ? e.path().substr(5) : "stage";
      m.fail("zero_optimization." + field,
             zero.zero.contains(field) ? zero.zero[field] : Json(nullptr),
             std::string("bitlab's ") + e.what());
    }
    experiment["zero"] = zero.zero;
  }
  if (ds.contains("optimizer")) {
    const Json& section = object_at(ds, "optimizer", "optimizer", m);
    if (!section.contains("type")) {
      m.fail("optimizer.type", Json(nullptr), "missing (DeepSpeed then builds no optimizer)");
    }
    const OptimizerType& type = find_type(section["type"], m);
    if (type.onebit && zero.stage > 0) {
      m.fail("zero_optimization.stage", Json(zero.stage),
             std::string(type.where) + " is not compatible with ZeRO "
             "(DeepSpeedEngine._configure_basic_optimizer asserts stage 0)");
    }
    Json opt = map_optimizer(section, wire, type, m);
    if (!zero.loco.is_null()) opt = to_loco(opt, zero, type, m);
    validate_optimizer(opt, m);
    experiment["optimizer"] = std::move(opt);
  } else {
    m.note("no optimizer section (DeepSpeed then uses the client's optimizer): the "
           "experiment's optimizer applies");
  }
  DeepSpeedMapping out = std::move(m.out());
  out.experiment = std::move(experiment);
  return out;
}

DeepSpeedMapping load_deepspeed_config(const std::string& path, std::optional<int64_t> workers) {
  return map_deepspeed_config(load_json_file(path), path, workers);
}

}  // namespace bitlab
