// The problems `bitlab` knows by name, in the order `bitlab list` shows them.
#include <cstdint>
#include <limits>

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

ProblemShape problem_shape(const Json& resolved, bool tensors) {
  const std::string name = resolved.at("name").get<std::string>();
  const auto* entry = find_entry(problem_registry(), name);
  if (!entry) config_fail("problem.name", Json(name), "not a registered problem");
  // Every registered problem has one (the `problems` suite walks the registry).
  if (!entry->shape) {
    config_fail("problem.name", Json(name), "this problem cannot say its shape without being built");
  }
  return entry->shape(resolved, tensors);
}

namespace {
constexpr auto kMaxParams = static_cast<size_t>(std::numeric_limits<int64_t>::max());
}  // namespace

void ParamBlame::fail() const {
  config_fail(field, value,
              "makes more than 2^63 - 1 parameters (a count must fit in a 64-bit integer)");
}

size_t ParamBlame::product(size_t a, size_t b) const {
  size_t out = 0;
  if (__builtin_mul_overflow(a, b, &out) || out > kMaxParams) fail();
  return out;
}

size_t ParamBlame::sum(size_t a, size_t b) const {
  size_t out = 0;
  if (__builtin_add_overflow(a, b, &out) || out > kMaxParams) fail();
  return out;
}

}  // namespace bitlab
