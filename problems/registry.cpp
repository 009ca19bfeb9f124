// The problems `bitlab` knows by name, in the order `bitlab list` shows them.
#include "problems/external.hpp"
#include "problems/real_problems.hpp"
#include "problems/synthetic.hpp"
#include "problems/transformer.hpp"

namespace bitlab {

const std::vector<RegistryEntry<Problem>>& problem_registry() {
  static const std::vector<RegistryEntry<Problem>> registry = {
      // synthetic
      quadratic_entry(),
      least_squares_entry(),
      logistic_entry(),
      mlp_entry(),
      // real data sets (problems/datasets.hpp)
      softmax_regression_entry(),
      deep_mlp_entry(),
      cnn_entry(),
      // a tiny decoder-only transformer LM on Debian's fortunes
      transformer_entry(),
      // your own model's gradients, from PyTorch (the Python bridge)
      external_entry(),
  };
  return registry;
}

}  // namespace bitlab
