// quadratic: f(x) = ½ Σ_k h_k (x_k − x*_k)², h_k = κ^(k/(d−1)) log-spaced
// from 1 to the condition number κ, x* ~ N(0, 1). Each worker's gradient is
// h ⊙ (x − x*) + σ·ξ with ξ ~ N(0, I) from its (worker, step) noise stream:
// the classic testbed for how an optimizer handles ill-conditioning and
// gradient noise, with a known optimum (f* = 0).
//
// The simulator's benchmark runs it at d = 2^22 with 16 workers, so
// loss_grad is one fused streaming pass over x, h, x* and g.
#include <algorithm>
#include <cmath>

#include "problems/synthetic.hpp"
#include "sim/kernels/reduce.hpp"

namespace bitlab {

Schema<QuadraticOptions> QuadraticOptions::schema() {
  using O = QuadraticOptions;
  return Schema<O>()
      .field("dim", &O::dim, "number of parameters d", {rules::at_least<int64_t>(1)})
      .field("condition_number", &O::condition_number,
             "κ = h_max / h_min; curvatures are log-spaced from 1 to κ", {rules::at_least(1.0)})
      .field("noise", &O::noise,
             "σ: standard deviation of the Gaussian noise added to every gradient entry of "
             "every worker (0: exact gradients)",
             {rules::at_least(0.0)})
      .field("tensors", &O::tensors,
             "number of tensors (block0, block1, ...) the vector is split into, as equal as "
             "possible (LAMB's trust ratios are per tensor)",
             {rules::at_least<int64_t>(1)})
      .field("data_seed", &O::data_seed,
             "seed of the problem instance (x*); independent of the run seed")
      .check([](const O& o, const std::string& path) {
        if (o.tensors > o.dim) {
          config_fail(join_path(path, "tensors"), Json(o.tensors),
                      "must be <= dim (" + std::to_string(o.dim) + ")");
        }
      });
}

namespace {

class Quadratic final : public Problem {
 public:
  explicit Quadratic(const QuadraticOptions& o)
      : noise_(static_cast<float>(o.noise)), tensors_(shape(o, true).tensors) {
    QuadraticData data = make_quadratic_data(o);
    h_ = std::move(data.curvature);
    x_star_ = std::move(data.optimum);
  }

  // d = dim; the vector is split into `tensors` blocks as equal as possible,
  // each described as its most square matrix (square_tensor).
  static ProblemShape shape(const QuadraticOptions& o, bool tensors) {
    ProblemShape out;
    out.dim = static_cast<size_t>(o.dim);
    if (!tensors) return out;
    const size_t d = out.dim, t = static_cast<size_t>(o.tensors);
    size_t offset = 0;
    for (size_t i = 0; i < t; ++i) {
      const size_t size = d / t + (i < d % t ? 1 : 0);
      out.tensors.push_back(square_tensor("block" + std::to_string(i), offset, size));
      offset += size;
    }
    return out;
  }

  size_t dim() const override { return h_.size(); }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  size_t num_train() const override { return 0; }

  // x0 = 0 whatever the seed: the instance is fixed by data_seed (x* is
  // random, so 0 is a generic start), and runs that differ only in their seed
  // then differ only in gradient noise, not in the starting point.
  void init_params(std::span<float> x, uint64_t /*seed*/) const override {
    std::fill(x.begin(), x.end(), 0.0f);
  }

  double loss_grad(std::span<const float> x, std::span<const uint32_t> /*batch*/,
                   std::span<float> g, const RngStream& noise, Workspace& /*ws*/) const override {
    const size_t d = h_.size();
    const float* __restrict xp = x.data();
    const float* __restrict hp = h_.data();
    const float* __restrict sp = x_star_.data();
    float* __restrict gp = g.data();
    double acc = 0.0;
    if (noise_ > 0.0f) {
      // Noise first (element-addressed, so deterministic), then one fused pass adds the
      // exact gradient.
      fill_normal(noise, g, noise_);
#pragma omp simd reduction(+ : acc)
      for (size_t i = 0; i < d; ++i) {
        const float diff = xp[i] - sp[i];
        gp[i] += hp[i] * diff;
        acc += static_cast<double>(hp[i]) * diff * diff;
      }
    } else {
#pragma omp simd reduction(+ : acc)
      for (size_t i = 0; i < d; ++i) {
        const float diff = xp[i] - sp[i];
        gp[i] = hp[i] * diff;
        acc += static_cast<double>(hp[i]) * diff * diff;
      }
    }
    return 0.5 * acc;
  }

  std::vector<std::string> eval_columns() const override {
    // suboptimality f(x) − f* (f* = 0): the same number as eval_loss, under
    // the name the rate lab (sim/lab/rate.hpp) and least_squares/logistic use.
    return {"eval_loss", "dist_to_opt", "suboptimality"};
  }

  void evaluate(std::span<const float> x, std::span<double> out) const override {
    double acc = 0.0;
    for (size_t i = 0; i < h_.size(); ++i) {
      const double diff = static_cast<double>(x[i]) - x_star_[i];
      acc += h_[i] * diff * diff;
    }
    out[0] = 0.5 * acc;
    out[1] = std::sqrt(distance_squared(x, x_star_));
    out[2] = out[0];
  }

  std::optional<double> optimal_loss() const override {
    return 0.0;
  }

 private:
  float noise_;
  std::vector<TensorInfo> tensors_;
  std::vector<float> h_;
  std::vector<float> x_star_;
};

}  // namespace

RegistryEntry<Problem> quadratic_entry() {
  return make_registry_entry<Problem, Quadratic, QuadraticOptions>(
      "quadratic",
      "quadratic ½Σh(x−x*)² with log-spaced curvatures (condition number κ) and Gaussian "
      "gradient noise σ; knows its optimum");
}

}  // namespace bitlab
