// cnn: a small convolutional net for Fashion-MNIST,
//   conv 5×5×c1 → relu → maxpool 2 → conv 5×5×c2 → relu → maxpool 2 → fc 10
// (no padding, stride 1: 28 → 24 → 12 → 8 → 4), softmax cross-entropy.
//
// Activations are NHWC, one sample after the other, so a batch of feature maps
// is a row-major (n·H·W) × C matrix. A convolution is im2col + one product
// (sim/core/matmul.hpp; over all workers' samples at once, the weight
// gradients per worker: ClassifierProblem::loss_grad_workers):
// row (s, y, x) of the column matrix holds the k×k×C input patch in (ky, kx, c)
// order — for each ky the k·C values are contiguous in NHWC, one memcpy — and
//   forward:  out = cols · Wᵀ + b                 (W: C_out × k·k·C_in, row-major)
//   backward: ∇W = δᵀ · cols;  ∇b = Σ_rows δ;  δcols = δ · W, scattered back
//             onto the input by col2im (not needed for the first layer).
// Max pooling keeps the index of each window's maximum (first one on ties)
// and routes the gradient there. Checked by finite differences in
// tests/test_real_problems.cpp.
//
// Parameters: conv1.weight (c1 × 25), conv1.bias, conv2.weight (c2 × 25·c1),
// conv2.bias, fc.weight (10 × 16·c2, input in (y, x, c) order), fc.bias.
#include <cstring>

#include "problems/classifier.hpp"
#include "problems/real_problems.hpp"
#include "sim/core/matmul.hpp"

namespace bitlab {

namespace {
constexpr Eigen::Index kKernel = 5;
}

Schema<CnnOptions> CnnOptions::schema() {
  using O = CnnOptions;
  Schema<O> s;
  add_dataset_fields(s, {"fashion_mnist"})
      .field("channels", &O::channels, "output channels of the two 5×5 convolutions",
             {Rule<std::vector<int64_t>>{[](const std::vector<int64_t>& c) {
                                           return c.size() == 2 && c[0] >= 1 && c[1] >= 1;
                                         },
                                         "must be two channel counts >= 1"}});
  return s;
}

namespace {

// One convolution + relu + 2×2 max-pool stage's buffers.
struct Stage {
  RowMatrixF cols;              // (n·Ho·Wo) × (k·k·C_in)
  RowMatrixF out;               // (n·Ho·Wo) × C_out, after relu
  RowMatrixF pooled;            // (n·Ho/2·Wo/2) × C_out
  std::vector<int32_t> argmax;  // per pooled element: flat index into out
  RowMatrixF dout;              // gradient w.r.t. out (pre-relu after masking)
};

struct CnnWorkspace final : ClassifierWorkspace {
  Stage s1, s2;
  RowMatrixF dflat;   // n × 16·c2
  RowMatrixF dcols2;  // gradient w.r.t. stage 2's columns
  RowMatrixF dpool1;  // gradient w.r.t. stage 1's pooled output
};

// im2col of n samples of size h × w × c (NHWC, contiguous) for a k×k kernel.
void im2col(const float* in, Eigen::Index n, Eigen::Index h, Eigen::Index w, Eigen::Index c,
            RowMatrixF& cols) {
  const Eigen::Index ho = h - kKernel + 1, wo = w - kKernel + 1, span = kKernel * c;
  cols.resize(n * ho * wo, kKernel * span);
  for (Eigen::Index s = 0; s < n; ++s) {
    const float* sample = in + s * h * w * c;
    for (Eigen::Index y = 0; y < ho; ++y) {
      for (Eigen::Index x = 0; x < wo; ++x) {
        float* row = cols.row((s * ho + y) * wo + x).data();
        for (Eigen::Index ky = 0; ky < kKernel; ++ky) {
          std::memcpy(row + ky * span, sample + ((y + ky) * w + x) * c,
                      sizeof(float) * size_t(span));
        }
      }
    }
  }
}

// The adjoint of im2col: adds each column row back onto its input patch.
void col2im(const RowMatrixF& cols, Eigen::Index n, Eigen::Index h, Eigen::Index w, Eigen::Index c,
            float* in) {
  const Eigen::Index ho = h - kKernel + 1, wo = w - kKernel + 1, span = kKernel * c;
  std::memset(in, 0, sizeof(float) * size_t(n * h * w * c));
  for (Eigen::Index s = 0; s < n; ++s) {
    float* sample = in + s * h * w * c;
    for (Eigen::Index y = 0; y < ho; ++y) {
      for (Eigen::Index x = 0; x < wo; ++x) {
        const float* row = cols.row((s * ho + y) * wo + x).data();
        for (Eigen::Index ky = 0; ky < kKernel; ++ky) {
          float* dst = sample + ((y + ky) * w + x) * c;
          for (Eigen::Index j = 0; j < span; ++j) dst[j] += row[ky * span + j];
        }
      }
    }
  }
}

// 2×2 max pool, stride 2, of n maps h × w × c (NHWC) in `in`.
void max_pool(const RowMatrixF& in, Eigen::Index n, Eigen::Index h, Eigen::Index w, RowMatrixF& out,
              std::vector<int32_t>& argmax) {
  const Eigen::Index c = in.cols(), ho = h / 2, wo = w / 2;
  out.resize(n * ho * wo, c);
  argmax.resize(size_t(out.size()));
  const float* src = in.data();
  for (Eigen::Index s = 0; s < n; ++s) {
    for (Eigen::Index y = 0; y < ho; ++y) {
      for (Eigen::Index x = 0; x < wo; ++x) {
        const Eigen::Index o = ((s * ho + y) * wo + x) * c;
        for (Eigen::Index ch = 0; ch < c; ++ch) {
          Eigen::Index best = ((s * h + 2 * y) * w + 2 * x) * c + ch;
          for (const Eigen::Index dy : {0, 1}) {
            for (const Eigen::Index dx : {0, 1}) {
              const Eigen::Index i = ((s * h + 2 * y + dy) * w + 2 * x + dx) * c + ch;
              if (src[i] > src[best]) best = i;
            }
          }
          out.data()[o + ch] = src[best];
          argmax[size_t(o + ch)] = static_cast<int32_t>(best);
        }
      }
    }
  }
}

class Cnn final : public ClassifierProblem {
 public:
  Cnn(const CnnOptions& o, const DataScope& scope)
      : ClassifierProblem(o, scope), c1_(o.channels[0]), c2_(o.channels[1]) {
    h0_ = data_.height;
    h1_ = h0_ - kKernel + 1;  // 24
    p1_ = h1_ / 2;            // 12
    h2_ = p1_ - kKernel + 1;  // 8
    p2_ = h2_ / 2;            // 4
    tensors_ = make_tensors(parts(o, data_.height, data_.classes));
  }

  static ProblemShape shape(const CnnOptions& o, bool tensors) {
    const DatasetSize data = dataset_size(o);
    return shape_of_parts(parts(o, data.height, data.classes), data.train, tensors,
                          {"problem.channels", Json(o.channels)});
  }

  // Shapes as PyTorch's: conv weights [out, in, k, k], fc [classes, flat]
  // (flat = p2² · c2, p2 the side after both stages); a count over int64
  // blames the channels.
  static std::vector<TensorPart> parts(const CnnOptions& o, int64_t height, int classes) {
    const ParamBlame blame{"problem.channels", Json(o.channels)};
    const auto c1 = size_t(o.channels[0]), c2 = size_t(o.channels[1]), k2 = size_t(kKernel * kKernel),
               c = size_t(classes);
    const auto p2 = size_t(((height - kKernel + 1) / 2 - kKernel + 1) / 2);
    const size_t flat = blame.product(p2 * p2, c2);
    return {{"conv1.weight", blame.product(c1, k2), c1, 1},
            {"conv1.bias", c1},
            {"conv2.weight", blame.product(blame.product(c2, c1), k2), c2, c1},
            {"conv2.bias", c2},
            {"fc.weight", blame.product(c, flat), c, flat},
            {"fc.bias", c}};
  }

  size_t dim() const override { return tensors_.back().offset + tensors_.back().size; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }

  // He (gain 2) for the convolutions, which feed a relu; LeCun (1) for fc.
  void init_params(std::span<float> x, uint64_t seed) const override {
    std::fill(x.begin(), x.end(), 0.0f);
    RngStream rng(seed, Purpose::kInit);
    const auto fill = [&](size_t t, Eigen::Index fan_in, double gain) {
      fill_fan_in_normal(x.subspan(tensors_[t].offset, tensors_[t].size), size_t(fan_in), gain,
                         rng);
    };
    fill(0, kKernel * kKernel, 2.0);
    fill(2, kKernel * kKernel * c1_, 2.0);
    fill(4, flat(), 1.0);
  }

  std::unique_ptr<Workspace> make_workspace() const override {
    return std::make_unique<CnnWorkspace>();
  }

  // A sample is already 576 rows of the first convolution's product and 64
  // of the second's: one worker's batch fills the products, and grouping
  // workers would only multiply the workspace (about 0.2 MB a sample).
  size_t pass_samples() const override { return 1; }

  void backward(std::span<const float> x, std::span<const WorkerRows> workers,
                Workspace& workspace) const override {
    auto& ws = static_cast<CnnWorkspace&>(workspace);
    const Eigen::Index n = ws.rows.rows();
    const RowMatrixF& dlogits = ws.logits;
    // Rows per sample of each stage's matrices: worker w's rows of stage 1
    // are [begin·576, (begin + count)·576), and so on.
    const Eigen::Index rows1 = h1_ * h1_, rows2 = h2_ * h2_;

    // fc.
    const Eigen::Map<const RowMatrixF> flat_in(ws.s2.pooled.data(), n, flat());
    worker_layer_grads(workers, dlogits, flat_in, 1, tensors_[4].offset, tensors_[5].offset);
    ws.dflat.resize(n, flat());
    matmul_nn(dlogits, param_map(x, 4, data_.classes, flat()), ws.dflat);

    // Stage 2: unpool, relu, conv (∇W, ∇b, δcols), col2im onto pooled 1.
    unpool_relu(ws.dflat.data(), ws.s2);
    worker_layer_grads(workers, ws.s2.dout, ws.s2.cols, rows2, tensors_[2].offset,
                       tensors_[3].offset);
    ws.dcols2.resize(ws.s2.cols.rows(), ws.s2.cols.cols());
    matmul_nn(ws.s2.dout, param_map(x, 2, c2_, kKernel * kKernel * c1_), ws.dcols2);
    ws.dpool1.resize(ws.s1.pooled.rows(), c1_);
    col2im(ws.dcols2, n, p1_, p1_, c1_, ws.dpool1.data());

    // Stage 1: unpool, relu, conv (∇W, ∇b; the input needs no gradient).
    unpool_relu(ws.dpool1.data(), ws.s1);
    worker_layer_grads(workers, ws.s1.dout, ws.s1.cols, rows1, tensors_[0].offset,
                       tensors_[1].offset);
  }

 protected:
  void forward_logits(std::span<const float> x, const RowMatrixF& rows, Workspace& workspace,
                      RowMatrixF& logits) const override {
    auto& ws = static_cast<CnnWorkspace&>(workspace);
    const Eigen::Index n = rows.rows();
    conv_relu_pool(x, 0, rows.data(), n, h0_, 1, c1_, ws.s1, ws.packed);
    conv_relu_pool(x, 2, ws.s1.pooled.data(), n, p1_, c1_, c2_, ws.s2, ws.packed);
    const Eigen::Map<const RowMatrixF> flat_in(ws.s2.pooled.data(), n, flat());
    logits.resize(n, data_.classes);
    matmul_nt(flat_in, param_map(x, 4, data_.classes, flat()), logits, ws.packed);
    add_to_rows(logits, param_vec(x, 5).data());
  }

 private:
  Eigen::Index flat() const { return p2_ * p2_ * c2_; }

  Eigen::Map<const RowMatrixF> param_map(std::span<const float> x, size_t t, Eigen::Index r,
                                         Eigen::Index c) const {
    return Eigen::Map<const RowMatrixF>(x.data() + tensors_[t].offset, r, c);
  }
  Eigen::Map<const Eigen::VectorXf> param_vec(std::span<const float> x, size_t t) const {
    return Eigen::Map<const Eigen::VectorXf>(x.data() + tensors_[t].offset,
                                             Eigen::Index(tensors_[t].size));
  }

  // conv (weights tensor t, bias t+1) of n maps side × side × cin → relu → pool.
  void conv_relu_pool(std::span<const float> x, size_t t, const float* in, Eigen::Index n,
                      Eigen::Index side, Eigen::Index cin, Eigen::Index cout, Stage& s,
                      std::vector<float>& packed) const {
    im2col(in, n, side, side, cin, s.cols);
    s.out.resize(s.cols.rows(), cout);
    matmul_nt(s.cols, param_map(x, t, cout, s.cols.cols()), s.out, packed);
    add_to_rows(s.out, param_vec(x, t + 1).data());
    float* out = s.out.data();
    for (Eigen::Index i = 0; i < s.out.size(); ++i) out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    const Eigen::Index side_out = side - kKernel + 1;
    max_pool(s.out, n, side_out, side_out, s.pooled, s.argmax);
  }

  // s.dout = gradient w.r.t. the conv output (pre-relu) from the gradient
  // w.r.t. the pooled output `dpooled`.
  static void unpool_relu(const float* dpooled, Stage& s) {
    s.dout.setZero(s.out.rows(), s.out.cols());
    for (size_t i = 0; i < s.argmax.size(); ++i) s.dout.data()[s.argmax[i]] += dpooled[i];
    // relu: the output is > 0 exactly where the pre-activation is.
    s.dout.array() *= (s.out.array() > 0.0f).cast<float>();
  }

  Eigen::Index c1_, c2_;
  Eigen::Index h0_ = 0, h1_ = 0, p1_ = 0, h2_ = 0, p2_ = 0;
  std::vector<TensorInfo> tensors_;
};

}  // namespace

RegistryEntry<Problem> cnn_entry() {
  return make_registry_entry<Problem, Cnn, CnnOptions>(
      "cnn",
      "small convolutional net (conv5×5 → relu → pool → conv5×5 → relu → pool → fc) on "
      "Fashion-MNIST, im2col + GEMM");
}

}  // namespace bitlab
