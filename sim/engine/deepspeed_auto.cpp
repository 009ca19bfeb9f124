// The Trainer's "auto" values (deepspeed_auto.hpp). The table follows
// transformers' src/transformers/integrations/deepspeed.py:
// HfTrainerDeepSpeedConfig.trainer_config_process (batch sizes, clipping,
// the optimizer's params, the scheduler's lr, fp16/amp/bf16) and
// trainer_config_finalize (the scheduler's steps, ZeRO's hidden-size bucket
// sizes). Departures: the Trainer takes TrainingArguments' defaults for
// arguments a script leaves out; bitlab fills only from the arguments given
// (a default the user did not choose would silently decide the run), and
// names each default in the message instead. train_batch_size needs the
// world size: without "world_size" it is left out, so the run's
// cluster.workers decides it (DeepSpeed's own rule for a config without it).
#include "sim/engine/deepspeed_auto.hpp"

#include <cmath>
#include <functional>
#include <optional>
#include <string_view>

namespace bitlab {

namespace {

enum class ArgKind { kCount, kNumber, kFlag, kText };

struct TrainerArgument {
  std::string_view name;
  ArgKind kind;
};

// The TrainingArguments a DeepSpeed "auto" is filled from (plus world_size,
// the Trainer's process count, and hidden_size, the model config's).
constexpr TrainerArgument kTrainerArguments[] = {
    {"per_device_train_batch_size", ArgKind::kCount},
    {"gradient_accumulation_steps", ArgKind::kCount},
    {"world_size", ArgKind::kCount},
    {"max_grad_norm", ArgKind::kNumber},
    {"learning_rate", ArgKind::kNumber},
    {"adam_beta1", ArgKind::kNumber},
    {"adam_beta2", ArgKind::kNumber},
    {"adam_epsilon", ArgKind::kNumber},
    {"weight_decay", ArgKind::kNumber},
    {"fp16", ArgKind::kFlag},
    {"fp16_full_eval", ArgKind::kFlag},
    {"fp16_backend", ArgKind::kText},
    {"fp16_opt_level", ArgKind::kText},
    {"bf16", ArgKind::kFlag},
    {"bf16_full_eval", ArgKind::kFlag},
    {"max_steps", ArgKind::kCount},
    {"warmup_steps", ArgKind::kCount},
    {"warmup_ratio", ArgKind::kNumber},
    {"hidden_size", ArgKind::kCount},
};

// The arguments as given, checked by name and type.
class TrainerArgs {
 public:
  TrainerArgs(const Json& args, const std::string& where) : args_(args) {
    if (args_.is_null()) args_ = Json::object();
    if (!args_.is_object()) {
      throw ConfigError(where + " = " + show_value(args_) +
                            ": must be an object of the Trainer's arguments "
                            "({\"learning_rate\": 3e-5, ...})",
                        where);
    }
    std::vector<std::string> known;
    for (const auto& a : kTrainerArguments) known.emplace_back(a.name);
    for (auto it = args_.begin(); it != args_.end(); ++it) {
      const std::string path = where + "." + it.key();
      const TrainerArgument* spec = find(it.key());
      if (spec == nullptr) {
        const std::string close = closest_match(it.key(), known);
        throw ConfigError(path + " = " + show_value(it.value()) +
                              ": not a Trainer argument that fills a DeepSpeed \"auto\"" +
                              (close.empty() ? " (known: " + joined(known) + ")"
                                             : "; did you mean \"" + close + "\"?"),
                          path);
      }
      check_kind(*spec, it.value(), path);
    }
  }
  std::optional<Json> get(std::string_view name) const {
    const auto it = args_.find(std::string(name));
    if (it == args_.end()) return std::nullopt;
    return *it;
  }

 private:
  static const TrainerArgument* find(const std::string& name) {
    for (const auto& a : kTrainerArguments) {
      if (a.name == name) return &a;
    }
    return nullptr;
  }
  static std::string joined(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  }
  static void check_kind(const TrainerArgument& spec, const Json& v, const std::string& path) {
    switch (spec.kind) {
      case ArgKind::kCount:
        if (!v.is_number_integer() || v.get<int64_t>() < (spec.name == "warmup_steps" ? 0 : 1)) {
          throw ConfigError(path + " = " + show_value(v) + ": must be a positive integer", path);
        }
        return;
      case ArgKind::kNumber:
        if (!v.is_number() || !std::isfinite(v.get<double>())) {
          throw ConfigError(path + " = " + show_value(v) + ": must be a finite number", path);
        }
        return;
      case ArgKind::kFlag:
        if (!v.is_boolean()) {
          throw ConfigError(path + " = " + show_value(v) + ": must be true or false", path);
        }
        return;
      case ArgKind::kText:
        if (!v.is_string()) {
          throw ConfigError(path + " = " + show_value(v) + ": must be a string", path);
        }
        return;
    }
  }
  Json args_;
};

// The value at a dotted path of `ds`, or nullptr.
Json* node_at(Json& ds, std::string_view path) {
  Json* node = &ds;
  while (true) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!node->is_object() || !node->contains(key)) return nullptr;
    node = &(*node)[key];
    if (dot == std::string_view::npos) return node;
    path.remove_prefix(dot + 1);
  }
}

bool is_auto(const Json* v) { return v != nullptr && *v == Json("auto"); }

// A number of `ds` at `path` after filling, else the argument, else nullopt.
std::optional<Json> number_or(Json& ds, std::string_view path, const std::optional<Json>& arg) {
  const Json* v = node_at(ds, path);
  if (v != nullptr && v->is_number()) return *v;
  return arg;
}

// Either of two flags (fp16 or fp16_full_eval): nullopt when neither is given.
std::optional<bool> either(const TrainerArgs& a, std::string_view x, std::string_view y) {
  const auto vx = a.get(x), vy = a.get(y);
  if (!vx && !vy) return std::nullopt;
  return (vx && vx->get<bool>()) || (vy && vy->get<bool>());
}

// One field the Trainer fills: its path, the argument(s) named in messages,
// the Trainer's default, whether a set value must equal the argument's
// (fill_match) or "auto" alone is filled (fill_only), whether bitlab reads
// the field (an "auto" left there is refused), and the value.
struct AutoRule {
  std::string_view field, argument, trainer_default;
  bool must_match, bitlab_reads;
  std::function<std::optional<Json>(const TrainerArgs&, Json&)> value;
};

std::optional<Json> apex_backend(const TrainerArgs& a) {
  const auto fp16 = either(a, "fp16", "fp16_full_eval");
  if (!fp16) return std::nullopt;
  const auto backend = a.get("fp16_backend");
  return Json(*fp16 && backend && backend->get<std::string>() == "apex");
}

const std::vector<AutoRule>& auto_rules() {
  using A = const TrainerArgs&;
  static const std::vector<AutoRule> rules = {
      {"train_micro_batch_size_per_gpu", "per_device_train_batch_size", "8", true, true,
       [](A a, Json&) { return a.get("per_device_train_batch_size"); }},
      {"gradient_accumulation_steps", "gradient_accumulation_steps", "1", true, true,
       [](A a, Json&) { return a.get("gradient_accumulation_steps"); }},
      {"train_batch_size",
       "world_size × per_device_train_batch_size × gradient_accumulation_steps", "",
       true, true,
       [](A a, Json& ds) -> std::optional<Json> {
         const auto world = a.get("world_size");
         const auto micro = number_or(ds, "train_micro_batch_size_per_gpu",
                                      a.get("per_device_train_batch_size"));
         const Json* accum_node = node_at(ds, "gradient_accumulation_steps");
         auto accum = number_or(ds, "gradient_accumulation_steps",
                                a.get("gradient_accumulation_steps"));
         if (!accum && accum_node == nullptr) accum = Json(1);
         if (!world || !micro || !accum) return std::nullopt;
         return Json(world->get<int64_t>() * micro->get<int64_t>() * accum->get<int64_t>());
       }},
      {"gradient_clipping", "max_grad_norm", "1.0", true, true,
       [](A a, Json&) { return a.get("max_grad_norm"); }},
      {"optimizer.params.lr", "learning_rate", "5e-05", true, true,
       [](A a, Json&) { return a.get("learning_rate"); }},
      {"optimizer.params.betas", "adam_beta1, adam_beta2", "[0.9, 0.999]", true, true,
       [](A a, Json&) -> std::optional<Json> {
         const auto b1 = a.get("adam_beta1"), b2 = a.get("adam_beta2");
         if (!b1 || !b2) return std::nullopt;
         return Json::array({*b1, *b2});
       }},
      {"optimizer.params.eps", "adam_epsilon", "1e-08", true, true,
       [](A a, Json&) { return a.get("adam_epsilon"); }},
      {"optimizer.params.weight_decay", "weight_decay", "0.0", true, true,
       [](A a, Json&) { return a.get("weight_decay"); }},
      {"scheduler.params.warmup_min_lr", "(always 0)", "0", false, false,
       [](A, Json&) { return std::optional<Json>(Json(0)); }},
      {"scheduler.params.warmup_max_lr", "learning_rate", "5e-05", true, false,
       [](A a, Json&) { return a.get("learning_rate"); }},
      {"scheduler.params.total_num_steps", "max_steps", "", true, false,
       [](A a, Json&) { return a.get("max_steps"); }},
      {"scheduler.params.warmup_num_steps", "warmup_steps (or warmup_ratio × max_steps)", "0",
       true, false,
       [](A a, Json&) -> std::optional<Json> {
         if (const auto w = a.get("warmup_steps"); w && w->get<int64_t>() > 0) return w;
         const auto ratio = a.get("warmup_ratio"), steps = a.get("max_steps");
         if (ratio && steps) {
           return Json(static_cast<int64_t>(
               std::ceil(steps->get<double>() * ratio->get<double>())));
         }
         return a.get("warmup_steps");
       }},
      {"fp16.enabled", "fp16 or fp16_full_eval (fp16_backend not apex)", "false", true, true,
       [](A a, Json&) -> std::optional<Json> {
         const auto apex = apex_backend(a);
         const auto fp16 = either(a, "fp16", "fp16_full_eval");
         if (!fp16) return std::nullopt;
         return Json(*fp16 && !apex->get<bool>());
       }},
      {"amp.enabled", "fp16 with fp16_backend apex", "false", true, false,
       [](A a, Json&) { return apex_backend(a); }},
      {"amp.opt_level", "fp16_opt_level", "O1", true, false,
       [](A a, Json&) { return a.get("fp16_opt_level"); }},
      {"bf16.enabled", "bf16 or bf16_full_eval", "false", true, true,
       [](A a, Json&) -> std::optional<Json> {
         const auto bf16 = either(a, "bf16", "bf16_full_eval");
         if (!bf16) return std::nullopt;
         return Json(*bf16);
       }},
      {"zero_optimization.reduce_bucket_size", "hidden_size (hidden_size²)", "", false, false,
       [](A a, Json&) -> std::optional<Json> {
         const auto h = a.get("hidden_size");
         if (!h) return std::nullopt;
         return Json(h->get<int64_t>() * h->get<int64_t>());
       }},
      // Only under ZeRO stage 3 (trainer_config_finalize's is_zero3()).
      {"zero_optimization.stage3_prefetch_bucket_size", "hidden_size (0.9 × hidden_size²)", "",
       false, false,
       [](A a, Json& ds) -> std::optional<Json> {
         const auto h = a.get("hidden_size");
         const Json* stage = node_at(ds, "zero_optimization.stage");
         if (!h || stage == nullptr || *stage != Json(3)) return std::nullopt;
         return Json(0.9 * static_cast<double>(h->get<int64_t>() * h->get<int64_t>()));
       }},
      {"zero_optimization.stage3_param_persistence_threshold", "hidden_size (10 × hidden_size)",
       "", false, false,
       [](A a, Json& ds) -> std::optional<Json> {
         const auto h = a.get("hidden_size");
         const Json* stage = node_at(ds, "zero_optimization.stage");
         if (!h || stage == nullptr || *stage != Json(3)) return std::nullopt;
         return Json(10 * h->get<int64_t>());
       }},
  };
  return rules;
}

const AutoRule* rule_for(std::string_view field) {
  for (const auto& r : auto_rules()) {
    if (r.field == field) return &r;
  }
  return nullptr;
}

// The top-level fields bitlab reads (deepspeed.cpp maps them): an "auto"
// there cannot stay. Elsewhere (scheduler, ZeRO's buckets, amp) bitlab reads
// nothing, so an "auto" does no harm.
bool bitlab_reads(const std::string& path) {
  const std::string top = path.substr(0, path.find('.'));
  for (const char* k : {"train_batch_size", "train_micro_batch_size_per_gpu",
                        "gradient_accumulation_steps", "gradient_clipping", "optimizer", "fp16",
                        "bf16", "bfloat16", "communication_data_type"}) {
    if (top == k) return true;
  }
  return false;
}

void collect_auto(const Json& node, const std::string& path, std::vector<std::string>& out) {
  if (node == Json("auto")) {
    out.push_back(path);
  } else if (node.is_object()) {
    for (auto it = node.begin(); it != node.end(); ++it) {
      collect_auto(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
    }
  }
}

}  // namespace

DeepSpeedAutoFill fill_deepspeed_auto(Json ds, const Json& args_json, const std::string& source,
                                      const std::string& args_name) {
  const TrainerArgs args(args_json, args_name);
  DeepSpeedAutoFill out;
  std::vector<std::string> mismatches;
  for (const auto& rule : auto_rules()) {
    Json* v = node_at(ds, rule.field);
    if (v == nullptr) continue;
    const std::optional<Json> hf = rule.value(args, ds);
    const std::string field(rule.field);
    if (is_auto(v) && hf) {
      *v = *hf;
      out.notes.push_back(field + " = " + show_value(*hf) + " (from " +
                          std::string(rule.argument) + ", as the Hugging Face Trainer fills it)");
    } else if (is_auto(v) && field == "train_batch_size" && !args.get("world_size")) {
      ds.erase("train_batch_size");
      out.notes.push_back("train_batch_size = \"auto\": world_size not given, so the field is "
                          "left out and the run's cluster.workers is the world size "
                          "(train_batch_size = workers × micro batch × accumulation)");
    } else if (!is_auto(v) && rule.must_match && hf && *v != *hf) {
      mismatches.push_back(field + " = " + show_value(*v) + " vs " +
                           std::string(rule.argument) + " = " + show_value(*hf));
    }
  }
  if (!mismatches.empty()) {
    std::string text;
    for (const auto& m : mismatches) text += (text.empty() ? "" : "; ") + m;
    throw ConfigError(source + ": the DeepSpeed config disagrees with the Trainer's arguments "
                          "(the Trainer refuses this too, trainer_config_finalize): " +
                          text + "; set these fields to \"auto\" or drop the arguments",
                      mismatches.front().substr(0, mismatches.front().find(' ')));
  }
  out.config = std::move(ds);
  return out;
}

void refuse_unfilled_auto(const Json& ds, const std::string& source) {
  std::vector<std::string> found;
  collect_auto(ds, "", found);
  std::string listed;
  std::string first;
  int count = 0;
  for (const auto& path : found) {
    if (!bitlab_reads(path)) continue;
    const AutoRule* rule = rule_for(path);
    std::string how = rule == nullptr ? "no Trainer argument fills it: give the value"
                                      : std::string(rule->argument);
    if (rule != nullptr && !rule->trainer_default.empty()) {
      how += ", the Trainer's default " + std::string(rule->trainer_default);
    }
    listed += (listed.empty() ? "" : "; ") + path + " (" + how + ")";
    if (first.empty()) first = path;
    ++count;
  }
  if (count == 0) return;
  // "<first> = "auto": ..." keeps the shape of every input error (field, value, rule).
  throw ConfigError(
      source + ": " + first + " = \"auto\": \"auto\" is filled in by the Hugging Face "
          "Trainer from its arguments, not by DeepSpeed; " + std::to_string(count) +
          (count == 1 ? " field is" : " fields are") + " \"auto\" here: " + listed +
          ". Give the Trainer's arguments (Python: bitlab.from_deepspeed(cfg, "
          "auto={\"learning_rate\": 3e-5, ...}); an experiment file: \"deepspeed_auto\": {...} "
          "beside \"deepspeed_config\") or the values",
      first);
}

DeepSpeedMapping map_deepspeed_config_with_auto(const Json& ds, const Json& args,
                                                const std::string& source,
                                                const std::string& args_name,
                                                std::optional<int64_t> workers) {
  if (args.is_null()) return map_deepspeed_config(ds, source, workers);
  DeepSpeedAutoFill filled = fill_deepspeed_auto(ds, args, source, args_name);
  DeepSpeedMapping out = map_deepspeed_config(filled.config, source, workers);
  out.notes.insert(out.notes.begin(), filled.notes.begin(), filled.notes.end());
  return out;
}

}  // namespace bitlab
