// The optimizers `bitlab` knows by name. Adding one: its file(s) in
// optimizers/, an #include and one line below.
#include "sim/registry.hpp"

#include "optimizers/adam.hpp"
#include "optimizers/lamb.hpp"
#include "optimizers/momentum_sgd.hpp"
#include "optimizers/optimizer.hpp"
#include "optimizers/sgd.hpp"

namespace bitlab {

const std::vector<RegistryEntry<Optimizer>>& optimizer_registry() {
  static const std::vector<RegistryEntry<Optimizer>> kRegistry = {
      make_registry_entry<Optimizer, Sgd, SgdOptions>(
          "sgd", "minibatch SGD on the allreduced gradient, L2 weight decay (PyTorch SGD)"),
      make_registry_entry<Optimizer, MomentumSgd, MomentumSgdOptions>(
          "momentum_sgd", "SGD with heavy-ball or Nesterov momentum (PyTorch SGD, dampening 0)"),
      make_registry_entry<Optimizer, Adam, AdamOptions>(
          "adam", "Adam/AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019), full precision"),
      make_registry_entry<Optimizer, Lamb, LambOptions>(
          "lamb",
          "LAMB with clamped per-tensor trust ratio (You et al. 2020), as in the "
          "1-bit LAMB warm-up (Li et al. 2021), full precision"),
  };
  return kRegistry;
}

}  // namespace bitlab
