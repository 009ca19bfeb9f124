// Tests of the problems: gradients against finite differences, the known
// optima, tensor boundaries, determinism of data and gradients, and option
// validation.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "gradient_check.hpp"
#include "problems/external.hpp"
#include "problems/problem.hpp"
#include "problems/synthetic.hpp"
#include "sim/kernels/reduce.hpp"
#include "sim/core/rng.hpp"

using namespace bitlab;

namespace {

std::unique_ptr<Problem> make_problem(const std::string& name, const Json& raw) {
  const auto* entry = find_entry(problem_registry(), name);
  REQUIRE(entry != nullptr);
  return entry->make(entry->resolve(raw, "problem"));
}

std::string resolve_error(const std::string& name, const Json& raw) {
  const auto* entry = find_entry(problem_registry(), name);
  REQUIRE(entry != nullptr);
  try {
    entry->resolve(raw, "problem");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

// Small instances of every problem (both MLP activations).
struct Case {
  std::string name;
  Json options;
};
std::vector<Case> small_cases() {
  return {
      {"quadratic", {{"dim", 50}, {"condition_number", 100}, {"tensors", 3}}},
      {"least_squares", {{"dim", 8}, {"samples", 64}, {"test_samples", 16}}},
      {"logistic", {{"dim", 6}, {"samples", 64}, {"test_samples", 16}, {"l2", 0.01}}},
      {"mlp",
       {{"input_dim", 5}, {"hidden", 7}, {"classes", 3}, {"samples", 64}, {"test_samples", 16}}},
      {"mlp",
       {{"input_dim", 5},
        {"hidden", 7},
        {"classes", 3},
        {"samples", 64},
        {"test_samples", 16},
        {"activation", "relu"}}},
  };
}

std::vector<float> random_vector(size_t n, float scale, uint64_t seed) {
  std::vector<float> v(n);
  fill_normal(RngStream(seed, Purpose::kTest), v, scale);
  return v;
}

// A batch of `size` sample indices (with repeats allowed); empty for problems
// without data.
std::vector<uint32_t> random_batch(const Problem& p, size_t size, uint64_t seed) {
  if (p.num_train() == 0) return {};
  RngStream rng(seed, Purpose::kTest, 1);
  std::vector<uint32_t> b(size);
  for (auto& i : b) i = static_cast<uint32_t>(rng.next_below(p.num_train()));
  return b;
}

std::vector<uint32_t> full_batch(const Problem& p) {
  std::vector<uint32_t> b(p.num_train());
  std::iota(b.begin(), b.end(), 0u);
  return b;
}

double loss_at(const Problem& p, std::span<const float> x, std::span<const uint32_t> batch,
               Workspace& ws) {
  std::vector<float> g(p.dim());
  return p.loss_grad(x, batch, g, RngStream(0, Purpose::kGradNoise), ws);
}

size_t column(const Problem& p, const std::string& name) {
  const auto cols = p.eval_columns();
  const auto it = std::find(cols.begin(), cols.end(), name);
  REQUIRE(it != cols.end());
  return static_cast<size_t>(it - cols.begin());
}

std::vector<double> evaluate(const Problem& p, std::span<const float> x) {
  std::vector<double> out(p.eval_columns().size());
  p.evaluate(x, out);
  return out;
}

}  // namespace

TEST_SUITE("problems") {
  TEST_CASE("the registry lists the synthetic, then the real problems, in order") {
    const auto& reg = problem_registry();
    REQUIRE(reg.size() == 9);
    CHECK(reg[0].name == "quadratic");
    CHECK(reg[1].name == "least_squares");
    CHECK(reg[2].name == "logistic");
    CHECK(reg[3].name == "mlp");
    CHECK(reg[4].name == "softmax_regression");
    CHECK(reg[5].name == "deep_mlp");
    CHECK(reg[6].name == "cnn");
    CHECK(reg[7].name == "transformer");
    CHECK(reg[8].name == "external");  // the Python bridge's
    for (const auto& e : reg) {
      CHECK(!e.summary.empty());
      for (const auto& f : e.fields) CHECK_MESSAGE(!f.doc.empty(), e.name << "." << f.name);
    }
  }

  TEST_CASE("external: its tensors and start; never built from a file, never asked for a gradient") {
    const auto* entry = find_entry(problem_registry(), "external");
    REQUIRE(entry != nullptr);
    const Json raw = {{"name", "external"},
                      {"tensors", {{{"name", "w"}, {"shape", {2, 3}}},
                                   {{"name", "b"}, {"shape", {3}}}}}};
    const Json resolved = entry->resolve(raw, "problem");
    // `bitlab run` cannot compute its gradients: building it from a file is refused
    CHECK_THROWS_WITH_AS(entry->make(resolved), doctest::Contains("bitlab.torch"), ConfigError);
    // bad tensor lists name the field and the rule
    Json bad = raw;
    bad["tensors"][1]["shape"] = {0};
    CHECK_THROWS_WITH_AS(entry->resolve(bad, "problem"),
                         doctest::Contains("problem.tensors.1.shape = [0]"), ConfigError);
    bad = raw;
    bad["tensors"][1]["name"] = "w";
    CHECK_THROWS_WITH_AS(entry->resolve(bad, "problem"), doctest::Contains("names a tensor twice"),
                         ConfigError);

    ExternalOptions o;
    o.tensors = {{"w", {2, 3}}, {"b", {3}}};
    ExternalProblem p(o, std::vector<float>(9, 0.5f));
    REQUIRE(p.dim() == 9);
    CHECK(p.tensors()[0].rows == 2);
    CHECK(p.tensors()[0].cols == 3);
    CHECK(p.tensors()[1].one_dimensional());
    std::vector<float> x(9);
    p.init_params(x, 7);
    CHECK(x == std::vector<float>(9, 0.5f));
    // Its gradients are handed in (Simulation::take_gradient, the `handed` suite).
    CHECK(p.gradients_handed_in());
    std::vector<float> g(9);
    std::unique_ptr<Workspace> ws = p.make_workspace();
    CHECK_THROWS_AS(p.loss_grad(x, {}, g, RngStream(1, Purpose::kGradNoise, 0, 1), *ws),
                    std::logic_error);
  }

  TEST_CASE("gradients match central finite differences") {
    // Parameters are float, so the perturbed point is x ± h e_k rounded to
    // float; the denominator is the difference actually applied. With h =
    // 1e-2 the error of the difference quotient is
    //   rounding:   δf / h, with δf ≈ 1e-7·max(1, |f|) (float dot products
    //               and activations inside the loss, double accumulation)
    //               → 1e-5·max(1, |f|);
    //   truncation: h²|f'''|/6 ≈ 2e-5·|f'''| (0 for the quadratic and least
    //               squares; |f'''| = O(1) for the others at these scales).
    // The analytic gradient itself is float (relative error ~1e-6). So
    //   |fd − g_k| <= 1e-3·|g_k| + 2e-4·max(1, |f|)
    // leaves a margin of several times over these estimates (the worst case
    // seen is 0.15 of the tolerance, for the tanh MLP), while a wrong gradient (missing
    // term, wrong index or factor) is off by O(|g_k|) ≈ 0.1–1.
    constexpr double kH = 1e-2, kRel = 1e-3, kAbs = 2e-4;
    for (const auto& c : small_cases()) {
      CAPTURE(c.name);
      CAPTURE(c.options.dump());
      const auto p = make_problem(c.name, c.options);
      auto ws = p->make_workspace();
      const auto x = random_vector(p->dim(), 0.7f, 11);
      const auto batch = random_batch(*p, 8, 12);
      std::vector<float> g(p->dim());
      const double f = p->loss_grad(x, batch, g, RngStream(0, Purpose::kGradNoise), *ws);
      const double tol_abs = kAbs * std::max(1.0, std::abs(f));
      CHECK(std::abs(f - loss_at(*p, x, batch, *ws)) == 0.0);

      // Coordinates: first, last and a middle one of every tensor.
      std::vector<size_t> coords;
      for (const auto& t : p->tensors()) {
        coords.push_back(t.offset);
        coords.push_back(t.offset + t.size / 2);
        coords.push_back(t.offset + t.size - 1);
      }
      const auto v = random_vector(p->dim(), 1.0f, 13);
      testing::check_gradient_fd(*p, x, batch, g, coords, v, {kH, kRel, tol_abs}, *ws);
    }
  }

  TEST_CASE("tensors tile [0, dim) and evaluation fills every column") {
    for (const auto& c : small_cases()) {
      CAPTURE(c.name);
      const auto p = make_problem(c.name, c.options);
      size_t next = 0;
      for (const auto& t : p->tensors()) {
        CHECK(!t.name.empty());
        CHECK(t.offset == next);
        CHECK(t.size > 0);
        next = t.offset + t.size;
      }
      CHECK(next == p->dim());
      std::vector<float> x(p->dim());
      p->init_params(x, 3);
      CHECK(all_finite(x));
      for (const double v : evaluate(*p, x)) CHECK(std::isfinite(v));
      if (p->num_classes() > 0) {
        REQUIRE(p->train_labels().size() == p->num_train());
        for (const int32_t y : p->train_labels()) {
          CHECK(y >= 0);
          CHECK(y < p->num_classes());
        }
      }
    }
    // Tensor names the optimizers and the results refer to.
    const auto q = make_problem("quadratic", {{"dim", 10}, {"tensors", 3}});
    REQUIRE(q->tensors().size() == 3);
    CHECK(q->tensors()[0].name == "block0");
    CHECK(q->tensors()[0].size == 4);  // 10 = 4 + 3 + 3
    CHECK(q->tensors()[2].size == 3);
    const auto m = make_problem("mlp", small_cases()[3].options);
    REQUIRE(m->tensors().size() == 4);
    CHECK(m->tensors()[0].name == "fc1.weight");
    CHECK(m->tensors()[0].size == 7 * 5);
    CHECK(m->tensors()[3].name == "fc2.bias");
    CHECK(m->dim() == 7 * 5 + 7 + 3 * 7 + 3);
  }

  TEST_CASE("loss_grad is deterministic and the workspace can be reused across batch sizes") {
    for (const auto& c : small_cases()) {
      CAPTURE(c.name);
      const auto p = make_problem(c.name, c.options);
      auto ws = p->make_workspace();
      const auto x = random_vector(p->dim(), 0.5f, 21);
      const auto batch = random_batch(*p, 8, 22);
      const auto other = random_batch(*p, 13, 23);
      const RngStream noise(5, Purpose::kGradNoise, 2, 7);
      std::vector<float> g1(p->dim()), g2(p->dim()), g3(p->dim());
      const double f1 = p->loss_grad(x, batch, g1, noise, *ws);
      p->loss_grad(x, other, g3, noise, *ws);  // resizes the workspace
      const double f2 = p->loss_grad(x, batch, g2, noise, *ws);
      auto fresh = p->make_workspace();
      const double f3 = p->loss_grad(x, batch, g3, noise, *fresh);
      CHECK(f1 == f2);
      CHECK(f1 == f3);
      CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(g1.data(), g3.data(), g1.size() * sizeof(float)) == 0);
    }
  }

  TEST_CASE("the data set is a function of data_seed") {
    for (const auto& c : small_cases()) {
      CAPTURE(c.name);
      Json other_seed = c.options;
      other_seed["data_seed"] = 1;
      const auto a = make_problem(c.name, c.options);
      const auto b = make_problem(c.name, c.options);
      const auto d = make_problem(c.name, other_seed);
      const auto x = random_vector(a->dim(), 0.5f, 31);
      const auto batch = random_batch(*a, 16, 32);
      auto ws = a->make_workspace();
      std::vector<float> ga(a->dim()), gb(a->dim()), gd(a->dim());
      const RngStream noise(0, Purpose::kGradNoise);
      const double fa = a->loss_grad(x, batch, ga, noise, *ws);
      const double fb = b->loss_grad(x, batch, gb, noise, *ws);
      const double fd = d->loss_grad(x, batch, gd, noise, *ws);
      CHECK(fa == fb);
      CHECK(ga == gb);
      CHECK(fa != fd);
      CHECK(ga != gd);
      CHECK(evaluate(*a, x) == evaluate(*b, x));
      CHECK(evaluate(*a, x) != evaluate(*d, x));
      CHECK(std::ranges::equal(a->train_labels(), b->train_labels()));
    }
    // Initial parameters depend on the run seed only where they are random.
    const auto m = make_problem("mlp", small_cases()[3].options);
    std::vector<float> x1(m->dim()), x2(m->dim()), x3(m->dim());
    m->init_params(x1, 1);
    m->init_params(x2, 1);
    m->init_params(x3, 2);
    CHECK(x1 == x2);
    CHECK(x1 != x3);
    const TensorInfo& b1 = m->tensors()[1];
    for (size_t i = 0; i < b1.size; ++i) CHECK(x1[b1.offset + i] == 0.0f);
    const auto q = make_problem("quadratic", {{"dim", 7}});
    std::vector<float> q0(7, 1.0f);
    q->init_params(q0, 99);
    CHECK(q0 == std::vector<float>(7, 0.0f));
  }

  TEST_CASE("quadratic: optimum, curvatures and condition number") {
    QuadraticOptions o;
    o.dim = 64;
    o.condition_number = 1000.0;
    const auto p = make_problem("quadratic", QuadraticOptions::schema().write(o));
    const QuadraticData data = make_quadratic_data(o);
    auto ws = p->make_workspace();
    std::vector<float> g(p->dim(), 1.0f);
    const double f = p->loss_grad(data.optimum, {}, g, RngStream(0, Purpose::kGradNoise), *ws);
    CHECK(f == 0.0);
    CHECK(sum_squares(g) == 0.0);
    CHECK(p->optimal_loss() == 0.0);
    const auto eval = evaluate(*p, data.optimum);
    CHECK(eval[column(*p, "eval_loss")] == 0.0);
    CHECK(eval[column(*p, "dist_to_opt")] == 0.0);
    CHECK(p->num_train() == 0);

    const auto [lo, hi] = std::ranges::minmax(data.curvature);
    CHECK(lo == 1.0f);
    CHECK(hi / lo == 1000.0f);  // exactly: h_0 = κ^0, h_{d-1} = κ^1
    CHECK(std::ranges::is_sorted(data.curvature));
    // Log-spaced: h_k = κ^(k/(d−1)).
    CHECK(data.curvature[21] == doctest::Approx(std::pow(1000.0, 21.0 / 63.0)).epsilon(1e-6));

    // The gradient at x* + e_k is h_k e_k (float x* + 1 − x* is exact for
    // |x*| < 1 only, so compare against the difference actually applied).
    auto x = data.optimum;
    x[5] += 1.0f;
    p->loss_grad(x, {}, g, RngStream(0, Purpose::kGradNoise), *ws);
    CHECK(g[5] == doctest::Approx(data.curvature[5] * (x[5] - data.optimum[5])));

    o.dim = 1;
    CHECK(make_quadratic_data(o).curvature == std::vector<float>{1.0f});
  }

  TEST_CASE("quadratic: gradient noise is N(0, σ²), per worker and step") {
    QuadraticOptions o;
    o.dim = 200000;
    o.noise = 0.3;
    const auto p = make_problem("quadratic", QuadraticOptions::schema().write(o));
    const QuadraticData data = make_quadratic_data(o);
    auto ws = p->make_workspace();
    const auto x = random_vector(p->dim(), 1.0f, 41);
    const RngStream noise(9, Purpose::kGradNoise, 3, 17);
    std::vector<float> g(p->dim()), g_again(p->dim()), g_other(p->dim());
    const double f = p->loss_grad(x, {}, g, noise, *ws);
    p->loss_grad(x, {}, g_again, noise, *ws);
    p->loss_grad(x, {}, g_other, RngStream(9, Purpose::kGradNoise, 3, 18), *ws);
    CHECK(g == g_again);
    CHECK(g != g_other);
    // The reported loss is the noise-free f(x).
    CHECK(f == doctest::Approx(evaluate(*p, x)[0]).epsilon(1e-6));

    double sum = 0.0, sum_sq = 0.0;
    const double n = static_cast<double>(p->dim());
    for (size_t i = 0; i < p->dim(); ++i) {
      const float exact = data.curvature[i] * (x[i] - data.optimum[i]);
      const double xi = static_cast<double>(g[i]) - exact;  // float rounding ~1e-6: negligible
      sum += xi;
      sum_sq += xi * xi;
    }
    const double mean = sum / n, var = sum_sq / n - mean * mean;
    const double sigma = o.noise;
    // The sample mean has standard error σ/√n and the sample variance
    // σ²·√(2/n): allow 5 standard errors (a false alarm has probability
    // < 1e-6, and the draw is fixed anyway).
    CHECK(std::abs(mean) < 5.0 * sigma / std::sqrt(n));
    CHECK(std::abs(var - sigma * sigma) < 5.0 * sigma * sigma * std::sqrt(2.0 / n));
  }

  TEST_CASE("least squares: the reference optimum is optimal") {
    LeastSquaresOptions o;
    o.dim = 12;
    o.samples = 200;
    o.test_samples = 50;
    const auto p = make_problem("least_squares", LeastSquaresOptions::schema().write(o));
    const auto data = make_least_squares_data(o);
    const Eigen::VectorXd x_opt = least_squares_solution(data.train);
    REQUIRE(p->optimal_loss().has_value());
    const double f_opt = *p->optimal_loss();
    CHECK(f_opt == doctest::Approx(least_squares_objective(data.train, x_opt)));
    // With noise_std = 0.1 the optimum's loss is about σ²/2·(1 − d/m).
    CHECK(f_opt > 0.001);
    CHECK(f_opt < 0.01);

    std::vector<float> x(p->dim());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(x_opt(Eigen::Index(i)));
    auto ws = p->make_workspace();
    std::vector<float> g(p->dim());
    const auto all = full_batch(*p);
    p->loss_grad(x, all, g, RngStream(0, Purpose::kGradNoise), *ws);
    // At x_opt rounded to float (|δx| ≈ 6e-8·|x| ≈ 3e-7 in norm here) the
    // gradient is H δx with ‖H‖ = ‖AᵀA/m‖ ≈ (1 + √(d/m))² ≈ 1.6, plus the
    // float evaluation error ~ d·6e-8·‖a‖‖x‖ ≈ 1e-5 at most: < 1e-4 holds
    // with margin, while a wrong solve would leave gradients of O(0.1).
    CHECK(norm2(g) < 1e-4);
    // And its suboptimality, ½ δxᵀHδx ≈ 1e-13, is 0 to double precision.
    const auto at_opt = evaluate(*p, x);
    CHECK(std::abs(at_opt[column(*p, "suboptimality")]) < 1e-10);
    CHECK(at_opt[column(*p, "train_loss_full")] >= f_opt - 1e-15);

    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto y = random_vector(p->dim(), 0.1f, 50 + seed);
      std::vector<float> z(p->dim());
      for (size_t i = 0; i < z.size(); ++i) z[i] = x[i] + y[i];
      const auto e = evaluate(*p, z);
      CHECK(e[column(*p, "train_loss_full")] > f_opt);
      CHECK(e[column(*p, "suboptimality")] > 0.0);
      // The float loss over the full batch agrees with the double one.
      CHECK(loss_at(*p, z, all, *ws) ==
            doctest::Approx(e[column(*p, "train_loss_full")]).epsilon(1e-5));
    }
  }

  TEST_CASE("logistic: the reference optimum is optimal") {
    LogisticOptions o;
    o.dim = 10;
    o.samples = 500;
    o.test_samples = 100;
    o.l2 = 1e-2;
    const auto p = make_problem("logistic", LogisticOptions::schema().write(o));
    const auto data = make_logistic_data(o);
    const auto p_opt = logistic_solution(data.train, o.l2);
    REQUIRE(p_opt.has_value());
    REQUIRE(p->optimal_loss().has_value());
    const double f_opt = *p->optimal_loss();
    CHECK(p->num_classes() == 2);

    std::vector<float> x(p->dim());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((*p_opt)(Eigen::Index(i)));
    auto ws = p->make_workspace();
    std::vector<float> g(p->dim());
    const auto all = full_batch(*p);
    const double f_float = p->loss_grad(x, all, g, RngStream(0, Purpose::kGradNoise), *ws);
    // Same argument as for least squares: the Hessian is bounded by
    // ¼‖XᵀX/n‖ + λ ≈ 1, the rounding δx ~ 1e-7, float evaluation error
    // ~1e-6: < 1e-4 with margin; a solve that stopped early (Newton's
    // iterates have gradients 1e-1, 1e-2, ...) would fail.
    CHECK(norm2(g) < 1e-4);
    CHECK(f_float == doctest::Approx(f_opt).epsilon(1e-5));
    const auto at_opt = evaluate(*p, x);
    CHECK(std::abs(at_opt[column(*p, "suboptimality")]) < 1e-10);
    // The model fits the data better than chance but not perfectly.
    CHECK(at_opt[column(*p, "eval_accuracy")] > 0.6);
    CHECK(at_opt[column(*p, "eval_accuracy")] < 1.0);

    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto y = random_vector(p->dim(), 0.1f, 60 + seed);
      std::vector<float> z(p->dim());
      for (size_t i = 0; i < z.size(); ++i) z[i] = x[i] + y[i];
      const auto e = evaluate(*p, z);
      CHECK(e[column(*p, "train_loss_full")] > f_opt);
      CHECK(loss_at(*p, z, all, *ws) ==
            doctest::Approx(e[column(*p, "train_loss_full")]).epsilon(1e-5));
    }
    const std::vector<float> zeros(p->dim(), 0.0f);
    CHECK(evaluate(*p, zeros)[column(*p, "eval_loss")] == doctest::Approx(std::log(2.0)));
  }

  TEST_CASE("logistic: separable data without regularisation has no reference optimum") {
    // 10 points in 20 dimensions are always linearly separable: with l2 = 0
    // the loss has no minimiser, so there is no optimal loss to report.
    const auto p =
        make_problem("logistic", {{"dim", 20}, {"samples", 10}, {"test_samples", 5}, {"l2", 0}});
    CHECK_FALSE(p->optimal_loss().has_value());
    const std::vector<float> zeros(p->dim(), 0.0f);
    CHECK(std::isnan(evaluate(*p, zeros)[column(*p, "suboptimality")]));
  }

  TEST_CASE("mlp: the default data set is learnable but not trivial") {
    MlpOptions o;
    const MlpData data = make_mlp_data(o);
    // Nearest centre is the Bayes classifier (equal priors, identity
    // covariance): its test accuracy is the best any model can expect.
    size_t correct = 0;
    for (Eigen::Index r = 0; r < data.test.x.rows(); ++r) {
      Eigen::Index best = 0;
      (data.centres.rowwise() - data.test.x.row(r)).rowwise().squaredNorm().minCoeff(&best);
      correct += best == data.test.labels[static_cast<size_t>(r)];
    }
    const double bayes = double(correct) / double(data.test.count());
    CHECK(bayes > 0.85);
    CHECK(bayes < 0.97);

    // Classes are sampled uniformly: every class has a fair share.
    std::vector<int> counts(static_cast<size_t>(o.classes), 0);
    for (const int32_t y : data.train.labels) ++counts[static_cast<size_t>(y)];
    for (const int n : counts) CHECK(n > 0.8 * double(o.samples) / double(o.classes));

    // A few hundred steps of SGD with momentum get close to it.
    const auto p = make_problem("mlp", MlpOptions::schema().write(o));
    std::vector<float> x(p->dim()), g(p->dim()), m(p->dim(), 0.0f);
    p->init_params(x, 1);
    const double acc0 = evaluate(*p, x)[column(*p, "eval_accuracy")];
    auto ws = p->make_workspace();
    for (int step = 0; step < 400; ++step) {
      const auto batch = random_batch(*p, 64, 1000 + step);
      p->loss_grad(x, batch, g, RngStream(0, Purpose::kGradNoise), *ws);
      for (size_t i = 0; i < x.size(); ++i) {
        m[i] = 0.9f * m[i] + g[i];
        x[i] -= 0.05f * m[i];
      }
    }
    const auto e = evaluate(*p, x);
    CHECK(acc0 < 0.6);
    CHECK(e[column(*p, "eval_accuracy")] > bayes - 0.05);
    CHECK(e[column(*p, "eval_loss")] < 0.5);
    CHECK_FALSE(p->optimal_loss().has_value());
  }

  TEST_CASE("invalid options name the field, the value and the rule") {
    CHECK(resolve_error("quadratic", {{"condition_number", 0.5}}) ==
          "problem.condition_number = 0.5: must be >= 1");
    CHECK(resolve_error("quadratic", {{"noise", -1}}) == "problem.noise = -1: must be >= 0");
    CHECK(resolve_error("quadratic", {{"dim", 0}}) == "problem.dim = 0: must be >= 1");
    CHECK(resolve_error("quadratic", {{"dim", 4}, {"tensors", 5}}) ==
          "problem.tensors = 5: must be <= dim (4)");
    const std::string unknown = resolve_error("quadratic", {{"conditon_number", 10}});
    CHECK(unknown.find("problem.conditon_number = 10: unknown key; did you mean "
                       "\"condition_number\"?") == 0);
    CHECK(resolve_error("least_squares", {{"samples", 0}}) == "problem.samples = 0: must be >= 1");
    CHECK(resolve_error("least_squares", {{"noise_std", -0.1}}) ==
          "problem.noise_std = -0.1: must be >= 0");
    CHECK(resolve_error("logistic", {{"l2", -1e-3}}) == "problem.l2 = -0.001: must be >= 0");
    CHECK(resolve_error("logistic", {{"separation", 0}}) == "problem.separation = 0: must be > 0");
    CHECK(resolve_error("mlp", {{"classes", 1}}) == "problem.classes = 1: must be >= 2");
    CHECK(resolve_error("mlp", {{"activation", "sigmoid"}})
              .find("problem.activation = \"sigmoid\": must be one of \"tanh\", \"relu\"") == 0);
    CHECK(resolve_error("mlp", {{"hidden", 2.5}}) ==
          "problem.hidden = 2.5: must be a whole number");

    // Defaults are filled in the resolved options.
    const auto* e = find_entry(problem_registry(), "logistic");
    const Json r = e->resolve(Json::object(), "problem");
    CHECK(r["name"] == "logistic");
    CHECK(r["dim"] == 20);
    CHECK(r["samples"] == 2048);
    CHECK(r["l2"] == doctest::Approx(1e-3));
    CHECK(r["data_seed"] == 0);
  }
}
