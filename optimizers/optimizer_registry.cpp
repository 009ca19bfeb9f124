// The optimizers `bitlab` knows by name. Adding one: its file(s) in
// optimizers/ (its options struct declares its schema and its uncompressed
// twin), an #include and one line below (docs/extending.md).
#include "sim/core/registry.hpp"

#include <stdexcept>

#include "optimizers/adam.hpp"
#include "optimizers/binsgdm.hpp"
#include "optimizers/lamb.hpp"
#include "optimizers/loco.hpp"
#include "optimizers/momentum_sgd.hpp"
#include "optimizers/onebit_adam.hpp"
#include "optimizers/onebit_lamb.hpp"
#include "optimizers/optimizer.hpp"
#include "optimizers/sgd.hpp"
#include "optimizers/zero_one_adam.hpp"

namespace bitlab {

namespace {

std::vector<RegistryEntry<Optimizer>>& registry() {
  static std::vector<RegistryEntry<Optimizer>> entries = {
      make_registry_entry<Optimizer, Sgd, SgdOptions>(
          "sgd", "minibatch SGD on the allreduced gradient, L2 weight decay (PyTorch SGD)"),
      make_registry_entry<Optimizer, MomentumSgd, MomentumSgdOptions>(
          "momentum_sgd", "SGD with heavy-ball or Nesterov momentum (PyTorch SGD, dampening 0)"),
      make_registry_entry<Optimizer, Adam, AdamOptions>(
          "adam", "Adam/AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019), full precision"),
      make_registry_entry<Optimizer, OneBitAdam, OneBitAdamOptions>(
          "onebit_adam",
          "1-bit Adam (Tang et al. 2021): Adam warm-up, then frozen variance and the momentum "
          "through the error-compensated 1-bit allreduce; switch after freeze_step"),
      make_registry_entry<Optimizer, OneBitAdam, ApmSqueezeOptions>(
          "apmsqueeze",
          "APMSqueeze (Tang et al. 2020): 1-bit Adam's algorithm, switching once the variance "
          "is stable (switch variance_stable, capped at freeze_step)"),
      make_registry_entry<Optimizer, Lamb, LambOptions>(
          "lamb",
          "LAMB with clamped per-tensor trust ratio (You et al. 2020), as in the "
          "1-bit LAMB warm-up (Li et al. 2021), full precision"),
      make_registry_entry<Optimizer, OneBitLamb, OneBitLambOptions>(
          "onebit_lamb",
          "1-bit LAMB (Li et al. 2021): LAMB warm-up, then 1-bit compressed momentum with "
          "frozen, factor-rescaled trust ratios"),
      make_registry_entry<Optimizer, ZeroOneAdam, ZeroOneAdamOptions>(
          "zero_one_adam",
          "0/1 Adam (Lu et al. 2023): adaptive variance freezing with 1-bit gradient steps, "
          "then local steps synchronised through the 1-bit allreduce"),
      make_registry_entry<Optimizer, Loco, LocoOptions>(
          "loco",
          "LoCo (Xie et al. 2024): 4-bit gradient exchange with moving-average error "
          "compensation around an unchanged Adam/AdamW or momentum SGD"),
      make_registry_entry<Optimizer, BinSgdm, BinSgdmOptions>(
          "binsgdm",
          "BinSGDM (ICLR 2023 submission) [verify]: unbiased 1-bit binarization of m ⊘ b, "
          "flat or hierarchical, no warm-up, no error feedback"),
  };
  return entries;
}

}  // namespace

const std::vector<RegistryEntry<Optimizer>>& optimizer_registry() {
  return registry();
}

void add_optimizer(RegistryEntry<Optimizer> entry) {
  if (find_entry(registry(), entry.name)) {
    throw std::invalid_argument("add_optimizer: an optimizer named \"" + entry.name +
                                "\" is already registered");
  }
  registry().push_back(std::move(entry));
}

const RegistryEntry<Optimizer>& baseline_optimizer() {
  return *find_entry(registry(), "adam");
}

void Optimizer::serialize(StateArchive&) {
  throw ConfigError(
      "this optimizer does not list its state (Optimizer::state), so its runs cannot be "
      "checkpointed or resumed");
}

void Optimizer::take_gradient(int, std::span<const float>) {
  // Only an optimizer whose begin_step() returned true is handed gradients.
  throw std::logic_error("Optimizer::take_gradient: this optimizer's begin_step() took none");
}

std::vector<std::string> Optimizer::warnings(int64_t) const {
  return {};
}

const std::vector<std::string>& Optimizer::run_warnings() const {
  static const std::vector<std::string> kNone;
  return kNone;
}

namespace {

// `resolved`'s options that the optimizer `name` also has, under its name
// (not yet resolved).
Json shared_options(const Json& resolved, const std::string& name) {
  const auto* entry = find_entry(registry(), name);
  Json out = {{"name", name}};
  for (const auto& f : entry->fields) {
    if (resolved.contains(f.name)) out[f.name] = resolved[f.name];
  }
  return out;
}

}  // namespace

Twin twin_optimizer(const Json& resolved) {
  const std::string name = resolved.at("name").get<std::string>();
  const auto* entry = find_entry(registry(), name);
  if (entry == nullptr) throw std::invalid_argument("twin_optimizer: no optimizer \"" + name + "\"");
  const TwinDeclaration twin = entry->twin(resolved);
  if (twin.name.empty()) return {nullptr, twin.why_none};
  if (find_entry(registry(), twin.name) == nullptr) {
    throw std::invalid_argument("optimizer " + name + " declares the twin \"" + twin.name +
                                "\", which is no registered optimizer");
  }
  Json options = shared_options(resolved, twin.name);
  for (const auto& [key, value] : twin.set.items()) options[key] = value;
  return {find_entry(registry(), twin.name)->resolve(options, "optimizer"), ""};
}

}  // namespace bitlab
