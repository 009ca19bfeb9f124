// Every problem's shape from its options alone (ProblemShape, the registry's
// `shape`), which `bitlab cost` prices without building the model: equal to
// what the built problem says, for every registered problem; parameter
// counts over int64 refused naming the option.
#include <doctest/doctest.h>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "problems/external.hpp"
#include "problems/problem.hpp"

using namespace bitlab;

namespace {

struct ShapeCase {
  std::string name;
  Json options;
};

// At least one case per registered problem (the test fails on one without),
// with options that change the layout. The real data sets are the Debian
// files the `real_problems` suite reads.
std::vector<ShapeCase> shape_cases() {
  return {
      {"quadratic", {{"dim", 50}, {"tensors", 3}}},
      {"quadratic", {{"dim", 7}}},
      {"least_squares", {{"dim", 8}, {"samples", 64}, {"test_samples", 16}}},
      {"logistic", {{"dim", 6}, {"samples", 64}, {"test_samples", 16}}},
      {"mlp", {{"input_dim", 5}, {"hidden", 7}, {"classes", 3}, {"samples", 64}}},
      {"softmax_regression", {{"dataset", "wine"}}},
      {"softmax_regression", {{"dataset", "breast_cancer"}, {"test_fraction", 0.3}}},
      {"deep_mlp", {{"dataset", "digits"}, {"widths", {17, 9}}, {"train_samples", 500}}},
      {"deep_mlp", {{"dataset", "fashion_mnist"}, {"widths", {33}}, {"test_samples", 10}}},
      {"cnn", {{"channels", {3, 5}}, {"train_samples", 100}, {"test_samples", 10}}},
      {"transformer", {{"d_model", 16}, {"heads", 2}, {"layers", 2}, {"context", 24}}},
      {"external", {{"tensors", Json::parse(R"([{"name": "w", "shape": [3, 4, 2]},
                                                 {"name": "b", "shape": [3]},
                                                 {"name": "s", "shape": []}])")}}},
  };
}

std::string shape_error(const std::string& name, const Json& options) {
  Json raw = options;
  raw["name"] = name;
  try {
    problem_shape(find_entry(problem_registry(), name)->resolve(raw, "problem"));
  } catch (const ConfigError& e) {
    return e.path() + " | " + e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("problems") {
  TEST_CASE("shape from the options equals the built problem, for every registered problem") {
    std::set<std::string> covered;
    for (const auto& c : shape_cases()) {
      INFO("problem ", c.name, " ", c.options.dump());
      const auto* entry = find_entry(problem_registry(), c.name);
      REQUIRE(entry != nullptr);
      REQUIRE(entry->shape);
      Json raw = c.options;
      raw["name"] = c.name;
      const Json resolved = entry->resolve(raw, "problem");
      const ProblemShape with = problem_shape(resolved, true);
      const ProblemShape without = problem_shape(resolved);
      CHECK(without.dim == with.dim);
      CHECK(without.num_train == with.num_train);
      CHECK(without.tensors.empty());
      // The external problem is never built from a file (its gradients come
      // from PyTorch): compared with the bridge's ExternalProblem.
      const std::unique_ptr<Problem> built =
          c.name == "external"
              ? std::make_unique<ExternalProblem>(
                    ExternalOptions::schema().read(c.options, "problem"),
                    std::vector<float>(with.dim, 0.0f))
              : entry->make(resolved);
      CHECK(with.dim == built->dim());
      CHECK(with.num_train == built->num_train());
      REQUIRE(with.tensors.size() == built->tensors().size());
      for (size_t t = 0; t < with.tensors.size(); ++t) {
        const TensorInfo &a = with.tensors[t], &b = built->tensors()[t];
        INFO("tensor ", b.name);
        CHECK(a.name == b.name);
        CHECK(a.offset == b.offset);
        CHECK(a.size == b.size);
        CHECK(a.rows == b.rows);
        CHECK(a.cols == b.cols);
      }
      covered.insert(c.name);
    }
    for (const auto& entry : problem_registry()) {
      INFO("a registered problem without a shape case: ", entry.name);
      CHECK(covered.count(entry.name) == 1);
    }
  }

  TEST_CASE("a model too large to build is shaped without allocating it") {
    // 1e12 parameters (4 TB of float): only the count is made.
    const ProblemShape q = problem_shape(find_entry(problem_registry(), "quadratic")
                                             ->resolve(Json{{"name", "quadratic"},
                                                            {"dim", int64_t{1000000000000}}},
                                                       "problem"));
    CHECK(q.dim == size_t{1000000000000});
    // deep_mlp: 784·2^20 + 2^20 + 2^20·2^20 + 2^20 + 10·2^20 + 10 parameters.
    const size_t w = size_t{1} << 20;
    const ProblemShape m = problem_shape(
        find_entry(problem_registry(), "deep_mlp")
            ->resolve(Json{{"name", "deep_mlp"}, {"dataset", "fashion_mnist"}, {"widths", {w, w}}},
                      "problem"));
    CHECK(m.dim == 784 * w + w + w * w + w + 10 * w + 10);
    CHECK(m.num_train == 60000);
  }

  TEST_CASE("parameter counts over int64 are refused naming the option, never wrapped") {
    const int64_t big = int64_t{1} << 32;  // its square is 2^64
    CHECK(shape_error("deep_mlp", {{"widths", {big, big}}}).rfind("problem.widths | ", 0) == 0);
    CHECK(shape_error("deep_mlp", {{"widths", {big, big}}}).find("2^63 - 1 parameters") !=
          std::string::npos);
    CHECK(shape_error("cnn", {{"channels", {big, big}}}).rfind("problem.channels | ", 0) == 0);
    CHECK(shape_error("transformer", {{"d_model", big}}).rfind("problem.d_model | ", 0) == 0);
    // Blocks that each fit, too many of them: the layers are blamed.
    CHECK(shape_error("transformer", {{"d_model", 1 << 20}, {"layers", int64_t{1} << 40}})
              .rfind("problem.layers | ", 0) == 0);
    CHECK(shape_error("mlp", {{"hidden", int64_t{1} << 62}}).rfind("problem.hidden | ", 0) == 0);
    CHECK(shape_error("logistic", {{"dim", INT64_MAX}}).rfind("problem.dim | ", 0) == 0);
    CHECK(shape_error("external",
                      {{"tensors", Json::parse(R"([{"name": "w", "shape": [1099511627776,
                                                   1099511627776]}])")}})
              .rfind("problem.tensors.0.shape | ", 0) == 0);
    // Just below the limit is a count, not an error.
    CHECK(shape_error("quadratic", {{"dim", INT64_MAX}}) == "(no error)");
    CHECK(shape_error("logistic", {{"dim", INT64_MAX - 1}}) == "(no error)");
  }
}
