// The problems `bitlab` knows by name, in the order `bitlab list` shows them.
#include "problems/synthetic.hpp"
#include "problems/transformer.hpp"

namespace bitlab {

const std::vector<RegistryEntry<Problem>>& problem_registry() {
  static const std::vector<RegistryEntry<Problem>> registry = {
      quadratic_entry(), least_squares_entry(), logistic_entry(), mlp_entry(), transformer_entry(),
  };
  return registry;
}

}  // namespace bitlab
