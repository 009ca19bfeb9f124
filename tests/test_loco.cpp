// LoCo (optimizers/loco.hpp, docs/algorithms.md §6): with an exact quantizer it is
// its base optimizer bit for bit; the error buffer is wired to exactly what
// was sent; bytes; resets; convergence; threads; options.
#include <doctest/doctest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "optimizers/adam.hpp"
#include "optimizers/loco.hpp"
#include "optimizers/momentum_sgd.hpp"
#include "optimizers/optimizer.hpp"
#include "sim/cluster/cluster.hpp"
#include "sim/collectives/loco_exchange.hpp"
#include "sim/comm/comm.hpp"
#include "sim/compress/quantize.hpp"
#include "sim/core/rng.hpp"
#include "sim/core/schema.hpp"
#include "sim/engine/config.hpp"
#include "sim/engine/simulation.hpp"
#include "tests/fixtures.hpp"
#include "tests/bits.hpp"

namespace bitlab {
namespace {
using bitlab::testing::bit_equal;
using bitlab::testing::random_vector;
using bitlab::testing::config_error_message;

using testing::FixedProblem;

using testing::GradFn;
// Called after each step with the optimizer (to read its state).
using LocoAfterStep = std::function<void(int64_t step, Optimizer& opt)>;

std::vector<float> run_loco(Optimizer& opt, const Problem& problem, int workers, int steps,
                       const GradFn& grads, Communicator* comm_out = nullptr,
                       const LocoAfterStep& after = nullptr) {
  testing::AfterStepFn each = nullptr;
  if (after) each = [&](int64_t t, const Cluster&, Optimizer&) { after(t, opt); };
  return testing::run_with_gradients(opt, problem, workers, steps, grads, comm_out, each);
}

GradFn random_grads() {
  return [](int64_t t, int i, std::span<float> g) {
    fill_normal(RngStream(17, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t)),
                g, 1.0f);
  };
}

// Gradients on the 4-bit grid of their own groups (group size 128): in every
// group one element is −M (M a power of two, varying with step, worker and
// group) and the others are k·M/8, k ∈ [−8, 7]. Then Q_4(g) = g exactly
// (and Q_8 too: k·M/8 = 16k·M/128), so with e_0 = 0 the error stays 0.
// `same_for_all`: every worker gets worker 0's gradient.
GradFn grid_grads(bool same_for_all) {
  return [same_for_all](int64_t t, int worker, std::span<float> g) {
    const int i = same_for_all ? 0 : worker;
    const RngStream rng(5, Purpose::kTest, static_cast<uint32_t>(i), static_cast<uint64_t>(t));
    const size_t groups = (g.size() + 127) / 128;
    for (size_t j = 0; j < groups; ++j) {
      const size_t begin = j * 128, len = std::min<size_t>(128, g.size() - begin);
      const float m = std::ldexp(1.0f, -static_cast<int>((t + i + j) % 3));
      for (size_t k = 0; k < len; ++k) {
        const int code = static_cast<int>(rng.block(begin + k)[0] % 16) - 8;
        g[begin + k] = static_cast<float>(code) * m / 8.0f;
      }
      g[begin + (static_cast<size_t>(t) * 7 + static_cast<size_t>(i) * 3 + j) % len] = -m;
    }
  };
}

// Most tests below were written for the flat and allgather exchanges (the
// error feedback outside the exchange); they name them unless a test sets
// `exchange` itself. The two-stage tests are at the end.
std::unique_ptr<Optimizer> make_loco(Json raw) {
  raw["name"] = "loco";
  if (!raw.contains("exchange")) raw["exchange"] = raw.contains("node_size") ? "allgather" : "flat";
  const auto* e = find_entry(optimizer_registry(), "loco");
  REQUIRE(e != nullptr);
  return e->make(e->resolve(raw, "optimizer"));
}

// ĥ = Q(h) with LoCo's spec and nearest rounding (what the collective sends).
std::vector<float> quantize_nearest(std::span<const float> h, int bits = 4) {
  QuantizeSpec spec;
  spec.bits = bits;
  spec.group_size = 128;
  std::vector<float> out(h.size());
  quantize_dequantize(h, out, spec, RngStream(0, Purpose::kCompress));
  return out;
}

// ---------------------------------------------------------------------------
// The two-stage exchange (exchange "two_stage", the default) against a plain
// transcription of the reference.

std::vector<float> q_groups(std::span<const float> x, size_t group, int bits) {
  QuantizeSpec spec;
  spec.bits = bits;
  spec.group_size = group;
  std::vector<float> out(x.size());
  quantize_dequantize(x, out, spec, RngStream(0, Purpose::kCompress));
  return out;
}

// DeepSpeed's all_to_all_loco_quant_reduce (coalesced_collectives.py) for n
// ranks on nodes of g, one call per step, written from the reference's own
// view and independently of LocoTwoStageExchange: rank r's swizzled buffer
// (loco_swizzled_quant_kernel stores partition z = a·g + b at slot
// b·nodes + a), its compensation and error in that order; all_to_all_single
// inside the node (chunk b of every local peer to local rank b);
// loco_dequant_reduce (sum over the g peers in order, + the inter error,
// re-quantize, error update); all_to_all_single across nodes (chunk a to node
// a); dequantize and average over nodes. The global loco_idx counter and the
// hasattr test decide resets. Arithmetic as bitlab states its departures:
// fp32, the node sum divided by g, errors stored Q_8 in the stage's groups,
// fallback tensors by the communicator's fp16 mean; the result rounded to fp16
// (bitlab's completing allgather).
class ReferenceLoco {
 public:
  ReferenceLoco(int n, int g, std::vector<TensorInfo> tensors, int64_t reset_t, float beta)
      : n_(n), g_(g), nodes_(n / g), tensors_(std::move(tensors)), reset_t_(reset_t), beta_(beta) {
    intra_.resize(tensors_.size());
    inter_.resize(tensors_.size());
    started_.assign(tensors_.size(), false);
  }

  std::vector<float> step(const std::vector<std::vector<float>>& grads) {
    size_t dim = 0;
    for (const auto& t : tensors_) dim += t.size;
    std::vector<float> out(dim);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const TensorInfo& info = tensors_[t];
      if (info.one_dimensional() || info.size % (2 * static_cast<size_t>(n_)) != 0) {
        fallback(grads, info, out);
      } else {
        compressed(t, grads, out);
      }
    }
    return out;
  }

  // Rank r's intra error of tensor t in the tensor's own (unswizzled) order.
  std::vector<float> intra_error(size_t t, int r) const {
    const size_t P = tensors_[t].size / static_cast<size_t>(n_);
    std::vector<float> e(tensors_[t].size);
    for (int z = 0; z < n_; ++z) {
      const size_t slot = static_cast<size_t>((z % g_) * nodes_ + z / g_);
      std::copy_n(intra_[t][r].begin() + static_cast<ptrdiff_t>(slot * P), P,
                  e.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(z) * P));
    }
    return e;
  }
  const std::vector<float>& inter_error(size_t t, int r) const { return inter_[t][r]; }

 private:
  // bitlab's documented group rule (the reference's where n divides max(rows, cols, n)).
  size_t group_of(const TensorInfo& info) const {
    const size_t P = info.size / static_cast<size_t>(n_);
    const size_t wanted = std::max({info.rows, info.cols, static_cast<size_t>(n_)});
    size_t k = (wanted + static_cast<size_t>(n_) - 1) / static_cast<size_t>(n_);
    while (P % k != 0) ++k;
    return P / k;
  }

  void fallback(const std::vector<std::vector<float>>& grads, const TensorInfo& info,
                std::vector<float>& out) {
    std::vector<float> rows(static_cast<size_t>(n_) * info.size);
    for (int r = 0; r < n_; ++r) {
      std::copy_n(grads[r].begin() + static_cast<ptrdiff_t>(info.offset), info.size,
                  rows.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(r) * info.size));
    }
    mean_over_workers({rows.data(), info.size, info.size, n_},
                      {out.data() + info.offset, info.size}, WireDtype::kFp16);
  }

  void error_update(std::vector<float>& e, const std::vector<float>& h, const std::vector<float>& q,
                    size_t group) const {
    for (size_t k = 0; k < e.size(); ++k) e[k] = beta_ * e[k] + (1.0f - beta_) * (h[k] - q[k]);
    e = q_groups(e, group, 8);
  }

  void compressed(size_t t, const std::vector<std::vector<float>>& grads, std::vector<float>& out) {
    const TensorInfo& info = tensors_[t];
    const size_t N = info.size, P = N / static_cast<size_t>(n_), e = group_of(info);
    const size_t nodes = static_cast<size_t>(nodes_), g = static_cast<size_t>(g_);
    if (!started_[t] || idx_ > reset_t_) {
      idx_ = 0;
      intra_[t].assign(static_cast<size_t>(n_), std::vector<float>(N, 0.0f));
      inter_[t].assign(static_cast<size_t>(n_), std::vector<float>(N / g, 0.0f));
      started_[t] = true;
    }
    std::vector<std::vector<float>> swizzled(static_cast<size_t>(n_));
    for (int r = 0; r < n_; ++r) {
      std::vector<float> h(N);
      for (size_t z = 0; z < static_cast<size_t>(n_); ++z) {
        const size_t slot = (z % g) * nodes + z / g;
        for (size_t k = 0; k < P; ++k) {
          h[slot * P + k] = grads[r][info.offset + z * P + k] + intra_[t][r][slot * P + k];
        }
      }
      swizzled[r] = q_groups(h, e, 4);
      error_update(intra_[t][r], h, swizzled[r], e);
    }
    std::vector<std::vector<float>> reduced(static_cast<size_t>(n_));
    for (size_t i = 0; i < nodes; ++i) {
      for (size_t b = 0; b < g; ++b) {
        const size_t r = i * g + b;
        std::vector<float> h(nodes * P);
        for (size_t k = 0; k < nodes * P; ++k) {
          float s = 0.0f;
          for (size_t j = 0; j < g; ++j) s += swizzled[i * g + j][b * nodes * P + k];
          h[k] = s / static_cast<float>(g) + inter_[t][r][k];
        }
        reduced[r] = q_groups(h, e, 4);
        error_update(inter_[t][r], h, reduced[r], e);
      }
    }
    for (size_t a = 0; a < nodes; ++a) {
      for (size_t b = 0; b < g; ++b) {
        const size_t z = a * g + b;
        for (size_t k = 0; k < P; ++k) {
          float s = 0.0f;
          for (size_t i = 0; i < nodes; ++i) s += reduced[i * g + b][a * P + k];
          out[info.offset + z * P + k] = s / static_cast<float>(nodes);
        }
      }
    }
    round_to_wire({out.data() + info.offset, N}, WireDtype::kFp16);
    ++idx_;
  }

  int n_, g_, nodes_;
  std::vector<TensorInfo> tensors_;
  int64_t reset_t_;
  float beta_;
  int64_t idx_ = 0;
  std::vector<bool> started_;
  std::vector<std::vector<std::vector<float>>> intra_, inter_;
};

// A model with every case: a compressed matrix whose group count n divides
// (48 × 40: 48 groups of 40), a 1-D bias, a matrix whose size 2n does not
// divide (10 × 13), and a matrix whose group count n does not divide (12 × 20:
// max = 20 groups asked, 3 per partition of 30 taken, groups of 10).
std::vector<TensorInfo> awkward_tensors() {
  return {{"a", 0, 1920, 48, 40},
          {"bias", 1920, 48},
          {"c", 1968, 130, 10, 13},
          {"d", 2098, 240, 12, 20}};
}

// ---------------------------------------------------------------------------

TEST_SUITE("loco") {
  TEST_CASE("exact quantizer: loco is its base optimizer bit for bit") {
    const size_t d = 300;  // groups of 128, 128 and 44
    const int n = 4, steps = 6;
    FixedProblem problem(random_vector(d, 3, 1.0f));
    SUBCASE("adam, every gather precision that keeps the mean exact, both error storages") {
      AdamOptions ao;
      ao.lr = 0.01;
      ao.weight_decay = 0.01;
      Adam adam(ao);
      const auto want = run_loco(adam, problem, n, steps, grid_grads(false));
      for (const char* gather : {"fp32", "fp16"}) {
        for (const int storage : {8, 32}) {
          for (const int bits : {4, 8}) {
            CAPTURE(gather);
            CAPTURE(storage);
            CAPTURE(bits);
            auto loco = make_loco({{"lr", 0.01},
                                   {"weight_decay", 0.01},
                                   {"gather", gather},
                                   {"error_storage_bits", storage},
                                   {"bits", bits}});
            const auto got = run_loco(
                *loco, problem, n, steps, grid_grads(false), nullptr, [&](int64_t, Optimizer& opt) {
                  auto& l = dynamic_cast<Loco&>(opt);
                  for (int i = 0; i < n; ++i) {
                    const auto e = l.error(i);
                    CHECK(std::all_of(e.begin(), e.end(), [](float v) { return v == 0.0f; }));
                  }
                });
            CHECK(bit_equal(got, want));
          }
        }
      }
      // The averaged mean is off the 4-bit grid, so "quantized" gather only
      // stays exact when every worker holds the same (on-grid) gradient.
      Adam adam_same(ao);
      const auto want_same = run_loco(adam_same, problem, n, steps, grid_grads(true));
      auto loco = make_loco({{"lr", 0.01}, {"weight_decay", 0.01}, {"gather", "quantized"}});
      CHECK(bit_equal(run_loco(*loco, problem, n, steps, grid_grads(true)), want_same));
      // The hierarchical allgather, likewise.
      auto hier = make_loco({{"lr", 0.01}, {"weight_decay", 0.01}, {"node_size", 2}});
      CHECK(bit_equal(run_loco(*hier, problem, n, steps, grid_grads(true)), want_same));
    }
    SUBCASE("adam without bias correction") {
      AdamOptions ao;
      ao.bias_correction = false;
      Adam adam(ao);
      auto loco = make_loco({{"bias_correction", false}, {"gather", "fp32"}});
      CHECK(bit_equal(run_loco(*loco, problem, n, steps, grid_grads(false)),
                      run_loco(adam, problem, n, steps, grid_grads(false))));
    }
    SUBCASE("momentum_sgd, heavy ball and Nesterov") {
      for (const bool nesterov : {false, true}) {
        CAPTURE(nesterov);
        MomentumSgdOptions mo;
        mo.lr = 0.01;
        mo.weight_decay = 0.01;
        mo.nesterov = nesterov;
        MomentumSgd sgd(mo);
        auto loco = make_loco({{"base", "momentum_sgd"},
                               {"lr", 0.01},
                               {"weight_decay", 0.01},
                               {"nesterov", nesterov},
                               {"gather", "fp16"}});
        CHECK(bit_equal(run_loco(*loco, problem, n, steps, grid_grads(false)),
                        run_loco(sgd, problem, n, steps, grid_grads(false))));
      }
    }
  }

  TEST_CASE("the error buffer sees exactly what was sent: e = β e + (1−β)(h − ĥ)") {
    // Exact storage, gather fp32: every quantity is recomputed here from the
    // gradients with the same float operations, so the checks are bit-exact.
    const size_t d = 300;
    const int n = 3;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"error_storage_bits", 32}, {"gather", "fp32"}});
    auto& loco = dynamic_cast<Loco&>(*opt);
    const float beta = 0.8f, one_minus = 1.0f - 0.8f;
    std::vector<std::vector<float>> e(n, std::vector<float>(d, 0.0f));
    std::vector<float> g(d), h(d), qh(n * d);
    const int steps = 50;
    std::vector<std::vector<double>> sum_q(n, std::vector<double>(d, 0.0)),
        sum_g(n, std::vector<double>(d, 0.0));
    run_loco(loco, problem, n, steps, random_grads(), nullptr, [&](int64_t t, Optimizer&) {
      for (int i = 0; i < n; ++i) {
        random_grads()(t, i, g);
        for (size_t k = 0; k < d; ++k) h[k] = g[k] + e[i][k];
        const auto q = quantize_nearest(h);
        std::copy(q.begin(), q.end(), qh.begin() + static_cast<ptrdiff_t>(i * d));
        for (size_t k = 0; k < d; ++k) e[i][k] = beta * e[i][k] + one_minus * (h[k] - q[k]);
        if (t <= 3) {
          CAPTURE(t);
          CAPTURE(i);
          CHECK(bit_equal(loco.quantized(i), q));
          CHECK(bit_equal(loco.error(i), e[i]));
        }
        for (size_t k = 0; k < d; ++k) {
          sum_q[i][k] += loco.quantized(i)[k];
          sum_g[i][k] += g[k];
        }
      }
      if (t <= 3) {
        // ḡ = mean_i ĥ_i (the communicator's tree, fp32 gather).
        std::vector<float> mean(d);
        mean_over_workers({qh.data(), d, d, n}, mean, WireDtype::kFp32);
        CHECK(bit_equal(loco.mean_gradient(), mean));
      }
    });
    // After step 1 (e_0 = 0): e_1 = (1−β)(g_1 − Q(g_1)) — covered by t = 1 above.
    // Telescoping, §6: Σ_{t≤T} ĥ_t = Σ_{t≤T} g_t − e_T/(1−β). In float each
    // step rounds e (|e| ≲ 0.1 here) a few times, error ≲ 1e-8, amplified by
    // 1/(1−β) = 5: over 50 steps ≲ 3e-6; observed max ≈ 5e-7. Bound 2e-5.
    double worst = 0.0;
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < d; ++k) {
        const double rhs = sum_g[i][k] - static_cast<double>(loco.error(i)[k]) / 0.2;
        worst = std::max(worst, std::abs(sum_q[i][k] - rhs));
      }
    }
    MESSAGE("telescoping identity, max abs deviation over 50 steps: " << worst);
    CHECK(worst < 2e-5);
  }

  TEST_CASE("stochastic rounding: the error and the mean use the same draws") {
    // The collective draws the rounding; the error update and ḡ must both
    // read that one ĥ_i (a second, independent quantization would differ).
    const size_t d = 300;
    const int n = 3;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"rounding", "stochastic"},
                          {"error_storage_bits", 32},
                          {"gather", "fp32"},
                          {"compress_seed", 99}});
    auto& loco = dynamic_cast<Loco&>(*opt);
    std::vector<float> g(d), qh(n * d);
    run_loco(loco, problem, n, 1, random_grads(), nullptr, [&](int64_t, Optimizer&) {
      for (int i = 0; i < n; ++i) {
        random_grads()(1, i, g);
        const auto q = loco.quantized(i);
        std::copy(q.begin(), q.end(), qh.begin() + static_cast<ptrdiff_t>(i * d));
        CHECK_FALSE(bit_equal(q, quantize_nearest(g)));  // really stochastic
        std::vector<float> e(d);
        for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
        CHECK(bit_equal(loco.error(i), e));
      }
      std::vector<float> mean(d);
      mean_over_workers({qh.data(), d, d, n}, mean, WireDtype::kFp32);
      CHECK(bit_equal(loco.mean_gradient(), mean));
    });
  }

  TEST_CASE("8-bit error storage: the stored error is Q8 of the fp32 update") {
    const size_t d = 300;
    FixedProblem problem(random_vector(d, 4, 1.0f));
    auto opt = make_loco({{"gather", "fp32"}});  // storage 8 by default
    auto& loco = dynamic_cast<Loco&>(*opt);
    std::vector<float> g(d);
    run_loco(loco, problem, 2, 1, random_grads(), nullptr, [&](int64_t, Optimizer&) {
      for (int i = 0; i < 2; ++i) {
        random_grads()(1, i, g);
        const auto q = quantize_nearest(g);
        std::vector<float> e(d);
        for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
        CHECK(bit_equal(loco.error(i), quantize_nearest(e, 8)));
      }
    });
  }

  TEST_CASE("bytes per step: the quantized reduce-scatter's closed form") {
    const size_t d = 1000;
    const int n = 4;
    FixedProblem problem(random_vector(d, 1, 1.0f));
    // D = 1024 (multiple of n·128), chunk 256: 128 bytes of 4-bit codes + 2
    // fp32 scales = 136 bytes; gather fp16 512, fp32 1024, quantized 136.
    const std::vector<std::pair<const char*, double>> cases = {{"fp16", 3.0 * (136 + 512)},
                                                               {"fp32", 3.0 * (136 + 1024)},
                                                               {"quantized", 3.0 * (136 + 136)}};
    for (const auto& [gather, want] : cases) {
      const std::string gather_name = gather;  // clang 14: no structured binding in CAPTURE
      CAPTURE(gather_name);
      auto opt = make_loco({{"gather", gather}});
      Communicator comm(n);
      run_loco(*opt, problem, n, 2, random_grads(), &comm);
      const auto& loco = dynamic_cast<Loco&>(*opt);
      CHECK(loco.reduce_scatter_bytes_per_step() == want);
      REQUIRE(comm.log().size() == 4);  // alltoall + allgather per step
      for (const int64_t step : {1, 2}) {
        double sent = 0;
        for (const auto& r : comm.log().records()) {
          if (r.step == step) sent += r.sent_bytes;
        }
        CHECK(sent == want);
      }
      CHECK(std::string(comm.log().records()[0].op) == "alltoall");
      CHECK(std::string(comm.log().records()[0].dtype) == "int4");
      CHECK(std::string(comm.log().records()[1].op) == "allgather");
    }
    SUBCASE("hierarchical: per stage") {
      // nbit image of 1000 elements: 500 code bytes + 8 scales·4 = 532.
      // node_size 2: intra allgather (2−1)·532, inter allgather (2−1)·532,
      // intra broadcast of 2 images: ½·1064.
      auto opt = make_loco({{"node_size", 2}});
      Communicator comm(n);
      run_loco(*opt, problem, n, 1, random_grads(), &comm);
      REQUIRE(comm.log().size() == 3);
      const auto& r = comm.log().records();
      CHECK(std::string(r[0].scope) == "intra");
      CHECK(r[0].sent_bytes == 532.0);
      CHECK(std::string(r[1].scope) == "inter");
      CHECK(r[1].sent_bytes == 532.0);
      CHECK(std::string(r[2].op) == "broadcast");
      CHECK(r[2].sent_bytes == 532.0);
    }
  }

  TEST_CASE("reset every reset_T steps") {
    const size_t d = 200;
    const int n = 2;
    FixedProblem problem(random_vector(d, 2, 1.0f));
    std::vector<float> g(d);
    auto fresh_error = [&](int64_t t, int i) {
      random_grads()(t, i, g);
      const auto q = quantize_nearest(g);
      std::vector<float> e(d);
      for (size_t k = 0; k < d; ++k) e[k] = 0.8f * 0.0f + (1.0f - 0.8f) * (g[k] - q[k]);
      return e;
    };
    for (const int64_t reset : {0, 3}) {
      CAPTURE(reset);
      auto opt = make_loco({{"reset_T", reset}, {"error_storage_bits", 32}});
      run_loco(*opt, problem, n, 7, random_grads(), nullptr, [&](int64_t t, Optimizer& o) {
        auto& loco = dynamic_cast<Loco&>(o);
        for (int i = 0; i < n; ++i) {
          CAPTURE(t);
          // Steps T+1, 2T+1, ... start from e = 0: the error is a first step's.
          const bool restarted = t == 1 || (reset > 0 && (t - 1) % reset == 0);
          CHECK(bit_equal(loco.error(i), fresh_error(t, i)) == restarted);
        }
      });
    }
  }

  TEST_CASE("convergence: logistic, 8 workers, within a few % of adam") {
    // 400 steps, batch 16 per worker, lr 0.02, default LoCo (4 bits, group 128,
    // err_beta 0.8, 8-bit error storage, fp16 gather). Observed train_loss_full:
    // start 0.6931 (x = 0), optimum 0.304597; adam 0.304761, loco 0.304775,
    // loco gather=quantized 0.304815 (suboptimality 1.6e-4, 1.8e-4, 2.2e-4).
    auto final_loss = [](const Json& opt) {
      const Json j = {{"steps", 400},
                      {"grad_norm_every", 0},
                      {"problem", {{"name", "logistic"}}},
                      {"cluster", {{"workers", 8}, {"batch_size", 16}}},
                      {"optimizer", opt}};
      Simulation sim(resolve_experiment(j, "t"));
      for (int s = 0; s < 400; ++s) sim.step();
      const auto cols = sim.eval_columns();
      const auto at = std::find(cols.begin(), cols.end(), "train_loss_full") - cols.begin();
      return sim.evaluate()[static_cast<size_t>(at)];
    };
    const double adam = final_loss({{"name", "adam"}, {"lr", 0.02}});
    const double loco = final_loss({{"name", "loco"}, {"lr", 0.02}, {"exchange", "flat"}});
    const double loco_q =
        final_loss({{"name", "loco"}, {"lr", 0.02}, {"exchange", "flat"}, {"gather", "quantized"}});
    MESSAGE("train_loss_full after 400 steps: adam " << adam << ", loco " << loco
                                                     << ", loco gather=quantized " << loco_q);
    CHECK(adam < 0.5);  // well below log 2 = 0.693 at x = 0
    CHECK(loco <= adam * 1.03);
    CHECK(loco_q <= adam * 1.03);
  }

  TEST_CASE("1 and 2 OpenMP threads give bit-identical results") {
    const size_t d = 74237;  // element loops and quantizer above their parallel thresholds
    FixedProblem problem(random_vector(d, 6, 0.3f));
    const std::vector<Json> configs = {
        {{"weight_decay", 0.02}},
        {{"base", "momentum_sgd"}, {"rounding", "stochastic"}, {"gather", "quantized"}},
        {{"node_size", 2}, {"error_storage_bits", 32}, {"reset_T", 2}},
    };
    const int saved = omp_get_max_threads();
    for (const auto& c : configs) {
      CAPTURE(c.dump());
      std::vector<std::vector<float>> results;
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        auto opt = make_loco(c);
        results.push_back(run_loco(*opt, problem, 4, 3, random_grads()));
      }
      CHECK(bit_equal(results[0], results[1]));
    }
    omp_set_num_threads(saved);
  }

  TEST_CASE("two_stage: bit for bit against the reference's algorithm, awkward sizes") {
    // 8 workers as 2 nodes of 4 and as 4 nodes of 2; reset_T 2 with two
    // compressed tensors, so the single counter resets one tensor at a time
    // (steps 3 and 4 here); 8-bit error storage.
    const std::vector<TensorInfo> tensors = awkward_tensors();
    const size_t d = 2338;
    const int n = 8;
    FixedProblem problem(random_vector(d, 3, 1.0f), tensors);
    for (const int g : {4, 2}) {
      CAPTURE(g);
      auto opt = make_loco({{"exchange", "two_stage"}, {"node_size", g}, {"reset_T", 2}});
      ReferenceLoco ref(n, g, tensors, 2, 0.8f);
      std::vector<std::vector<float>> grads(n, std::vector<float>(d));
      int checked = 0;
      run_loco(*opt, problem, n, 6, random_grads(), nullptr, [&](int64_t t, Optimizer& o) {
        CAPTURE(t);
        for (int r = 0; r < n; ++r) random_grads()(t, r, grads[r]);
        const std::vector<float> want = ref.step(grads);
        const auto& loco = dynamic_cast<Loco&>(o);
        CHECK(bit_equal(loco.mean_gradient(), want));
        const LocoTwoStageExchange& x = *loco.two_stage();
        for (int r = 0; r < n; ++r) {
          CHECK(bit_equal(x.error1(r).subspan(0, 1920), ref.intra_error(0, r)));
          CHECK(bit_equal(x.error1(r).subspan(2098, 240), ref.intra_error(3, r)));
          const auto e2 = x.error2(r);
          CHECK(bit_equal(e2.subspan(0, 1920 / g), ref.inter_error(0, r)));
          CHECK(bit_equal(e2.subspan(1920 / g, 240 / g), ref.inter_error(3, r)));
        }
        ++checked;
      });
      CHECK(checked == 6);
    }
  }

  TEST_CASE("two_stage: records and bytes from the reference's message layout") {
    // n = 8 on 2 nodes of 4, the awkward model, fp16 wire. Per compressed
    // tensor: codes and scales all-to-all'ed inside the node (g = 4 ranks, 2
    // groups), then across nodes (2 ranks, 4 groups sharing the NIC).
    //   a (1920, groups of 40): intra codes S 960, sent 3/4·960 = 720; scales
    //     48·4 = 192, sent 144; inter codes S 240 (480 elements), sent 120;
    //     scales 12·4 = 48, sent 24.
    //   bias (48, 1-D): reduce_scatter S 48·2 = 96, sent 7/8·96 = 84.
    //   c (130, 2n ∤ 130): padded to 136: S 272, sent 238.
    //   d (240, groups of 10): codes 120 → 90; scales 96 → 72; inter codes 30
    //     → 15; scales 24 → 12.
    //   completion: allgather of 2338 fp16 values: S 4676, sent 7/8·4676.
    FixedProblem problem(random_vector(2338, 4, 1.0f), awkward_tensors());
    auto opt = make_loco({{"exchange", "two_stage"}, {"node_size", 4}});
    Communicator comm(8);
    run_loco(*opt, problem, 8, 1, random_grads(), &comm);
    const auto& r = comm.log().records();
    REQUIRE(r.size() == 11);
    const std::vector<std::tuple<const char*, const char*, const char*, int, int, int64_t, double>>
        want = {{"alltoall", "int4", "intra", 4, 2, 960, 720},
                {"alltoall", "fp32", "intra", 4, 2, 192, 144},
                {"alltoall", "int4", "inter", 2, 4, 240, 120},
                {"alltoall", "fp32", "inter", 2, 4, 48, 24},
                {"reduce_scatter", "fp16", "all", 8, 1, 96, 84},
                {"reduce_scatter", "fp16", "all", 8, 1, 272, 238},
                {"alltoall", "int4", "intra", 4, 2, 120, 90},
                {"alltoall", "fp32", "intra", 4, 2, 96, 72},
                {"alltoall", "int4", "inter", 2, 4, 30, 15},
                {"alltoall", "fp32", "inter", 2, 4, 24, 12},
                {"allgather", "fp16", "all", 8, 1, 4676, 4676 * 7.0 / 8}};
    for (size_t k = 0; k < want.size(); ++k) {
      CAPTURE(k);
      const auto& [op, dtype, scope, ranks, groups, payload, sent] = want[k];
      CHECK(std::string(r[k].op) == op);
      CHECK(std::string(r[k].dtype) == dtype);
      CHECK(std::string(r[k].scope) == scope);
      CHECK(r[k].ranks == ranks);
      CHECK(r[k].groups == groups);
      CHECK(r[k].payload_bytes == payload);
      CHECK(r[k].sent_bytes == sent);
      CHECK(r[k].messages == (std::string(op) == "alltoall" ? ranks - 1 : 7));
    }
  }

  TEST_CASE("two_stage: one node compresses nothing (one coalesced reduce-scatter) and warns") {
    const Json j = {{"steps", 2},
                    {"problem", {{"name", "logistic"}, {"dim", 32}}},
                    {"cluster", {{"workers", 8}}},
                    {"optimizer", {{"name", "loco"}}}};
    Simulation sim(resolve_experiment(j, "t"));
    sim.step();
    const auto& r = sim.comm().log().records();
    REQUIRE(r.size() == 2);  // weight 32 and bias 1 → 8, padded: (32 + 8)·2 bytes
    CHECK(std::string(r[0].op) == "reduce_scatter");
    CHECK(r[0].payload_bytes == 80);
    CHECK(std::string(r[1].op) == "allgather");
    const auto w = sim.optimizer().warnings(2);
    REQUIRE_FALSE(w.empty());
    CHECK(w.back().find("one node") != std::string::npos);
    // The network's nodes engage it: 8 workers on a preset of 4 GPUs per node.
    Json two_nodes = j;
    two_nodes["network"] = {{"preset", "ethernet_40g_v100x4"}};
    Simulation sim2(resolve_experiment(two_nodes, "t"));
    sim2.step();
    CHECK(sim2.comm().log().records().size() == 1 + 4 + 1);  // bias; weight's 4; completion
    CHECK(dynamic_cast<const Loco&>(sim2.optimizer()).two_stage()->nodes() == 2);
    CHECK(sim2.optimizer().warnings(2).empty());
    // A node size that is not the network's: the run says how it is priced.
    two_nodes["optimizer"]["node_size"] = 2;
    Simulation sim3(resolve_experiment(two_nodes, "t"));
    const auto w3 = sim3.optimizer().warnings(2);
    REQUIRE(w3.size() == 1);
    CHECK(w3[0].find("node_size = 2 differs from the network's 4 GPUs per node") !=
          std::string::npos);
  }

  TEST_CASE("two_stage: the 21-parameter logistic sends only the uncompressed fallback") {
    // d = 20 + 1 on 16 workers, 2 nodes: 20 is not divisible by 32 and the
    // bias is 1-D, so nothing is quantized (the flat exchange padded them to
    // n·128 and sent 4860 bytes). Each tensor is reduce-scattered in fp16
    // (padded to 32 and 16 values), then bitlab's fp16 allgather of the 21:
    // 15/16·(64 + 32 + 42) = 129.375 bytes, less than Adam's fp32 allreduce
    // (2·15/16·84 = 157.5).
    const Json j = {{"steps", 1},
                    {"problem", {{"name", "logistic"}, {"dim", 20}}},
                    {"cluster", {{"workers", 16}}},
                    {"optimizer", {{"name", "loco"}, {"node_size", 8}}}};
    Simulation sim(resolve_experiment(j, "t"));
    sim.step();
    double sent = 0;
    for (const auto& r : sim.comm().log().records()) {
      CHECK(std::string(r.dtype) == "fp16");
      sent += r.sent_bytes;
    }
    CHECK(sent == 129.375);
  }

  TEST_CASE("two_stage: both error buffers telescope (classic error feedback, fp32 storage)") {
    // With β = 0 and exact storage, e_t = h_t − Q(h_t) and h_t = x_t + e_{t−1}
    // at both stages, so Σ_t Q(h_t) = Σ_t x_t − e_T exactly in real
    // arithmetic: stage 1 with x = the worker's gradient, stage 2 with x = its
    // node mean of the stage-1 codes. Tolerance: 8 steps of sums of O(1)
    // values in fp32 round each partial sum once, so |residual| ≤ ~16 ulp of
    // the sums' magnitude (≤ 8·3): 1e-4 absolute covers it with room.
    const std::vector<TensorInfo> tensors = {{"a", 0, 1920, 48, 40}};
    const int n = 8, g = 4, steps = 8;
    FixedProblem problem(random_vector(1920, 5, 1.0f), tensors);
    auto opt = make_loco({{"exchange", "two_stage"},
                          {"node_size", g},
                          {"err_beta", 0.0},
                          {"error_storage_bits", 32},
                          {"reset_T", 0}});
    std::vector<std::vector<double>> sum_g(n, std::vector<double>(1920)),
        sum_q1(n, std::vector<double>(1920)), sum_x2(n, std::vector<double>(480)),
        sum_q2(n, std::vector<double>(480));
    std::vector<float> grad(1920);
    double worst1 = 0, worst2 = 0;
    run_loco(*opt, problem, n, steps, random_grads(), nullptr, [&](int64_t t, Optimizer& o) {
      const LocoTwoStageExchange& x = *dynamic_cast<Loco&>(o).two_stage();
      for (int w = 0; w < n; ++w) {
        random_grads()(t, w, grad);
        for (size_t k = 0; k < 1920; ++k) {
          sum_g[w][k] += grad[k];
          sum_q1[w][k] += x.stage1(w)[k];
        }
        // Stage 2's input: worker (i, b) holds partition a·g + b of every node a.
        const int i = w / g, b = w % g;
        for (int a = 0; a < n / g; ++a) {
          for (size_t k = 0; k < 240; ++k) {
            float s = 0.0f;
            for (int j = 0; j < g; ++j) s += x.stage1(i * g + j)[(a * g + b) * 240 + k];
            sum_x2[w][a * 240 + k] += s / g;
            sum_q2[w][a * 240 + k] += x.stage2(w)[a * 240 + k];
          }
        }
      }
      if (t < steps) return;
      for (int w = 0; w < n; ++w) {
        for (size_t k = 0; k < 1920; ++k) {
          worst1 = std::max(worst1, std::abs(sum_q1[w][k] + x.error1(w)[k] - sum_g[w][k]));
        }
        for (size_t k = 0; k < 480; ++k) {
          worst2 = std::max(worst2, std::abs(sum_q2[w][k] + x.error2(w)[k] - sum_x2[w][k]));
        }
      }
    });
    MESSAGE("telescoping residuals after 8 steps: stage 1 " << worst1 << ", stage 2 " << worst2);
    CHECK(worst1 < 1e-4);
    CHECK(worst2 < 1e-4);
  }

  TEST_CASE("two_stage: node_reduce sum is the reference's g × the mean (g a power of two)") {
    FixedProblem problem(random_vector(1920, 6, 1.0f), {{"a", 0, 1920, 48, 40}});
    auto mean_opt = make_loco({{"exchange", "two_stage"}, {"node_size", 4}, {"gather", "fp32"}});
    auto sum_opt = make_loco(
        {{"exchange", "two_stage"}, {"node_size", 4}, {"gather", "fp32"}, {"node_reduce", "sum"}});
    std::vector<float> a, b;
    run_loco(*mean_opt, problem, 8, 1, random_grads(), nullptr, [&](int64_t, Optimizer& o) {
      const auto m = dynamic_cast<Loco&>(o).mean_gradient();
      a.assign(m.begin(), m.end());
    });
    run_loco(*sum_opt, problem, 8, 1, random_grads(), nullptr, [&](int64_t, Optimizer& o) {
      const auto m = dynamic_cast<Loco&>(o).mean_gradient();
      b.assign(m.begin(), m.end());
    });
    REQUIRE(a.size() == b.size());
    size_t same = 0;
    for (size_t k = 0; k < a.size(); ++k) same += (4.0f * a[k] == b[k]);
    CHECK(same == a.size());  // exact: powers of two commute with the quantizer
  }

  TEST_CASE("two_stage: 1 and 2 OpenMP threads give bit-identical results") {
    FixedProblem problem(random_vector(2338, 7, 0.5f), awkward_tensors());
    const int saved = omp_get_max_threads();
    std::vector<std::vector<float>> results;
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      auto opt =
          make_loco({{"exchange", "two_stage"}, {"node_size", 2}, {"rounding", "stochastic"}});
      results.push_back(run_loco(*opt, problem, 8, 3, random_grads()));
    }
    omp_set_num_threads(saved);
    CHECK(bit_equal(results[0], results[1]));
  }

  // Under the MPI backend (tests/test_mpi.cpp runs it, bit-identical) a rank
  // holds the exchange's rows of its own workers only.
  TEST_CASE("two_stage on a rank's block of workers holds that block's rows only") {
    FixedProblem problem(random_vector(256, 8, 1.0f), {{"a", 0, 256, 16, 16}});
    ClusterOptions co;
    co.workers = 4;
    Cluster rank_block(co, problem, 1, WorkerRange{0, 2});  // what rank 0 of 2 holds
    auto two = make_loco({{"exchange", "two_stage"}, {"node_size", 2}});
    CHECK(config_error_message([&] { two->setup(rank_block); }) == "(no error)");
    // q1, e1 (256 floats each) and q2, e2 (256 / 2 each) of 2 workers, not 4.
    CHECK(two->held_worker_state_bytes() == 2 * (2 * 256 + 2 * 128) * 4);
    CHECK(two->held_worker_state_bytes() == LocoTwoStageExchange::resident_bytes_for(4, 2, 256, 2));
  }

  TEST_CASE("options: defaults, phase, errors name the field") {
    const LocoOptions o = LocoOptions::schema().read(Json::object(), "optimizer");
    CHECK(o.base == "adam");
    CHECK(o.lr == 1e-3);
    CHECK(o.bias_correction);
    CHECK(o.bits == 4);
    CHECK(o.group_size == 128);
    CHECK(o.rounding == "nearest");
    CHECK(o.err_beta == 0.8);
    CHECK(o.reset_T == 1024);
    CHECK(o.error_storage_bits == 8);
    CHECK(o.gather == "fp16");
    CHECK(o.exchange == "two_stage");
    CHECK(o.node_reduce == "mean");
    CHECK(o.node_size == 0);
    CHECK(o.compress_seed == 0);
    CHECK(std::string(Loco(o).phase()) == "compressed");

    auto err = [](Json j) {
      return config_error_message([&] { LocoOptions::schema().read(j, "optimizer"); });
    };
    CHECK(err({{"bits", 0}}) == "optimizer.bits = 0: must be in [1, 8]");
    CHECK(err({{"bits", 9}}) == "optimizer.bits = 9: must be in [1, 8]");
    CHECK(err({{"err_beta", 1.0}}) == "optimizer.err_beta = 1.0: must be in [0, 1)");
    CHECK(err({{"error_storage_bits", 16}}) ==
          "optimizer.error_storage_bits = 16: must be 8 or 32");
    CHECK(err({{"reset_T", -1}}) == "optimizer.reset_T = -1: must be >= 0");
    CHECK(err({{"group_size", 0}}) == "optimizer.group_size = 0: must be >= 1");
    CHECK(err({{"node_size", -2}}) == "optimizer.node_size = -2: must be >= 0");
    CHECK(err({{"base", "sgd"}}).find("optimizer.base = \"sgd\": must be one of") == 0);
    CHECK(err({{"gather", "int4"}}).find("optimizer.gather = \"int4\": must be one of") == 0);
    CHECK(err({{"rounding", "up"}}).find("optimizer.rounding = \"up\": must be one of") == 0);
    CHECK(err({{"compress_seed", -1}}) == "optimizer.compress_seed = -1: must be >= 0");
    CHECK(err({{"err_betta", 0.5}})
              .find("optimizer.err_betta = 0.5: unknown key; did you mean "
                    "\"err_beta\"?") == 0);
    // node_size must divide the workers: checked at setup.
    const Json bad = {{"steps", 1},
                      {"problem", {{"name", "logistic"}, {"dim", 10}}},
                      {"cluster", {{"workers", 4}}},
                      {"optimizer", {{"name", "loco"}, {"node_size", 3}}}};
    CHECK(config_error_message([&] { Simulation sim(resolve_experiment(bad, "t")); }) ==
          "optimizer.node_size = 3: must divide the number of workers (4)");
    CHECK(err({{"exchange", "ring"}}).find("optimizer.exchange = \"ring\": must be one of") == 0);
    CHECK(err({{"node_reduce", "max"}}).find("optimizer.node_reduce = \"max\": must be one of") ==
          0);
    Json quantized_two_stage = bad;
    quantized_two_stage["optimizer"] = {{"name", "loco"}, {"gather", "quantized"}};
    CHECK(config_error_message([&] {
            Simulation sim(resolve_experiment(quantized_two_stage, "t"));
          }).find("optimizer.gather = \"quantized\": quantized applies to exchange \"flat\"") == 0);
  }
}

}  // namespace
}  // namespace bitlab
