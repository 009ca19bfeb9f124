// Small problems for tests whose expected results are worked out by hand.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "optimizers/optimizer.hpp"
#include "problems/problem.hpp"
#include "problems/text_corpus.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/comm/comm.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"

namespace bitlab::testing {

// m samples, sample j has label j % classes and a scalar target t_j = j.
// Loss of a batch: mean over j of ½(x_0 − t_j)² + ½ Σ_{k>0} x_k²·(k+1);
// its gradient is known in closed form and depends on the batch.
class ToyProblem : public Problem {
 public:
  ToyProblem(size_t dim, size_t samples, int classes)
      : dim_(dim), samples_(samples), classes_(classes) {
    tensors_.push_back({"a", 0, dim / 2});
    tensors_.push_back({"b", dim / 2, dim - dim / 2});
    for (size_t j = 0; j < samples; ++j) labels_.push_back(static_cast<int32_t>(j % classes));
  }
  size_t dim() const override { return dim_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return samples_; }
  std::span<const int32_t> train_labels() const override { return labels_; }
  int num_classes() const override { return classes_; }
  void init_params(std::span<float> x, uint64_t) const override {
    for (size_t k = 0; k < x.size(); ++k) x[k] = 1.0f;
  }
  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream&, Workspace&) const override {
    double mean_t = 0;
    for (uint32_t j : batch) mean_t += j;
    mean_t = batch.empty() ? 0.0 : mean_t / batch.size();
    double loss = 0;
    for (uint32_t j : batch)
      loss += 0.5 * (x[0] - static_cast<double>(j)) * (x[0] - static_cast<double>(j));
    loss = batch.empty() ? 0.0 : loss / batch.size();
    g[0] = static_cast<float>(x[0] - mean_t);
    for (size_t k = 1; k < dim_; ++k) {
      loss += 0.5 * x[k] * x[k] * (k + 1);
      g[k] = x[k] * static_cast<float>(k + 1);
    }
    return loss;
  }
  std::vector<std::string> eval_columns() const override { return {"eval_loss"}; }
  void evaluate(std::span<const float> x, std::span<double> out) const override {
    double s = 0;
    for (float v : x) s += double{v} * v;
    out[0] = s;
  }

 private:
  size_t dim_, samples_;
  int classes_;
  std::vector<TensorInfo> tensors_;
  std::vector<int32_t> labels_;
};

// Initial parameters x0 and no data: tests write every worker's gradient
// straight into cluster.grads(), so expected trajectories depend only on
// numbers written in the test. Its own loss_grad returns zeros.
class FixedProblem : public Problem {
 public:
  explicit FixedProblem(std::vector<float> x0, std::vector<TensorInfo> tensors = {})
      : x0_(std::move(x0)), tensors_(std::move(tensors)) {
    if (tensors_.empty()) tensors_.push_back({"w", 0, x0_.size()});
  }
  size_t dim() const override { return x0_.size(); }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return 0; }
  void init_params(std::span<float> x, uint64_t) const override {
    std::copy(x0_.begin(), x0_.end(), x.begin());
  }
  double loss_grad(std::span<const float>, std::span<const uint32_t>, std::span<float> g,
                   const RngStream&, Workspace&) const override {
    std::fill(g.begin(), g.end(), 0.0f);
    return 0.0;
  }
  std::vector<std::string> eval_columns() const override { return {}; }
  void evaluate(std::span<const float>, std::span<double>) const override {}

 private:
  std::vector<float> x0_;
  std::vector<TensorInfo> tensors_;
};

// Writes worker `worker`'s gradient for (1-based) step `step`.
using GradFn = std::function<void(int64_t step, int worker, std::span<float> g)>;
// Called after each step, to read the optimizer's state.
using AfterStepFn = std::function<void(int64_t step, const Cluster& cluster, Optimizer& opt)>;

// Runs `steps` steps of `opt` on `workers` workers whose gradients `grads`
// writes, and returns the final shared parameters. `comm_out`, when given,
// receives the communicator (and its log).
inline std::vector<float> run_with_gradients(Optimizer& opt, const Problem& problem, int workers,
                                             int steps, const GradFn& grads,
                                             Communicator* comm_out = nullptr,
                                             const AfterStepFn& after = nullptr) {
  ClusterOptions co;
  co.workers = workers;
  Cluster cluster(co, problem, /*seed=*/1);
  Communicator comm(workers);
  opt.setup(cluster);
  for (int64_t t = 1; t <= steps; ++t) {
    for (int i = 0; i < workers; ++i) grads(t, i, cluster.grad(i));
    comm.begin_step(t);
    StepContext ctx{t, cluster, comm};
    opt.finish_step(ctx);
    if (after) after(t, cluster, opt);
  }
  if (comm_out) *comm_out = comm;
  auto x = cluster.params();
  return {x.begin(), x.end()};
}

// What f() throws as a ConfigError: its message, or its JSON path;
// "(no error)" when it throws none.
template <class F>
std::string config_error_message(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}
template <class F>
std::string config_error_path(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.path();
  }
  return "(no error)";
}

// Whether the Debian package fortunes-min's files (the transformer's default
// corpus) are installed; tests of the transformer skip, saying so, when not.
inline bool fortunes_installed() {
  for (const auto& f : default_fortune_files()) {
    if (!std::filesystem::exists(f)) return false;
  }
  return true;
}

// Tiny instances of the real models whose workers share a pass
// (Problem::loss_grad_workers) as "problem" JSON: deep_mlp with the dispatched
// tanh and with gelu, the CNN, and the transformer when its corpus is
// installed (`skipped` says whether it was left out).
inline std::vector<std::string> small_real_models(bool* skipped = nullptr) {
  std::vector<std::string> out = {
      R"({"name": "deep_mlp", "dataset": "digits", "widths": [11], "activation": "tanh"})",
      R"({"name": "deep_mlp", "dataset": "digits", "widths": [11], "activation": "gelu"})",
      R"({"name": "cnn", "channels": [3, 4], "train_samples": 64, "test_samples": 40,
          "train_eval_samples": 32})"};
  const bool fortunes = fortunes_installed();
  if (fortunes) {
    out.push_back(R"({"name": "transformer", "context": 8, "d_model": 12, "layers": 1,
                      "heads": 2, "eval_windows": 8})");
  }
  if (skipped) *skipped = !fortunes;
  return out;
}

// A simulation whose cluster keeps every worker's gradient row. The 1-bit
// family takes each gradient into its state as it is made and keeps no rows
// (Optimizer::take_gradient); a test that reads cluster().grad(i) hands a
// registry problem in, which keeps them (a given problem whose gradients are
// not handed in: Problem::gradients_handed_in).
inline Simulation simulation_with_rows(const Experiment& e) {
  const auto* entry = find_entry(problem_registry(), e.problem.at("name").get<std::string>());
  return Simulation(e, entry->make(e.problem, DataScope{}));
}

}  // namespace bitlab::testing
