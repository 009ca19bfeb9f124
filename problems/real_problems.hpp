// Options and registry entries of the real-data problems (softmax_regression,
// deep_mlp, cnn). The problem classes stay private to their .cpp files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "problems/datasets.hpp"

namespace bitlab {

struct SoftmaxRegressionOptions : DatasetOptions {
  static Schema<SoftmaxRegressionOptions> schema();
};
RegistryEntry<Problem> softmax_regression_entry();

struct DeepMlpOptions : DatasetOptions {
  std::vector<int64_t> widths = {64};
  std::string activation = "relu";
  static Schema<DeepMlpOptions> schema();
};
RegistryEntry<Problem> deep_mlp_entry();

// conv k×k×c1 → relu → maxpool 2 → conv k×k×c2 → relu → maxpool 2 → fc classes,
// no padding, stride 1 (28×28 with k = 5: 24 → 12 → 8 → 4).
struct CnnOptions : DatasetOptions {
  CnnOptions() { dataset = "fashion_mnist"; }
  std::vector<int64_t> channels = {8, 16};
  int64_t kernel = 5;
  static Schema<CnnOptions> schema();
};
RegistryEntry<Problem> cnn_entry();

}  // namespace bitlab
