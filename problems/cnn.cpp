// cnn: a small convolutional net for Fashion-MNIST,
//   conv 5×5×c1 → relu → maxpool 2 → conv 5×5×c2 → relu → maxpool 2 → fc 10
// (no padding, stride 1: 28 → 24 → 12 → 8 → 4), softmax cross-entropy.
//
// A convolution is im2col + fixed-order products (sim/kernels/matmul.hpp; the
// im2col, its transpose and col2im are dispatched kernels too,
// sim/kernels/conv.hpp), laid out so that each product's panels stay in cache
// (before: the whole batch's column matrices, 1.8 MB a worker, went to memory
// and back):
//   conv1 (one input channel, 576 output pixels a sample, K1 = 25 taps): one
//     sample at a time. Forward out1ᵀ = W1 · colsᵀ (colsᵀ: K1 × 576, so the
//     pixels fill the vector lanes; 8 channels would fill half an AVX-512
//     vector), then bias, relu and pooling while the sample's output is in L1;
//     out1 is kept NCHW. ∇W1 = δ1ᵀ · cols, summed sample after sample with
//     matmul_acc over a column matrix made again in the backward pass (576 ×
//     32: K1 padded to whole register tiles; the padding's results are
//     dropped, except the last column's, below).
//   conv2 (NHWC, 64 output pixels a sample, K2 = 25·c1): blocks of
//     kConv2Samples samples, whose column matrix (213 kB, K2 padded to 208
//     columns) stays in L2 from im2col to the products: forward
//     out2 = cols · W2ᵀ + b, relu and pooling block by block; backward
//     ∇W2 = δ2ᵀ · cols (matmul_acc, block after block within each worker, on
//     whole tiles), δcols = δ2 · W2 scattered back by col2im.
//   Neither column matrix is kept between the passes (before: 1.8 MB + 1.6 MB
//   for a worker's 32 samples).
//   The bias gradients ∇b = Σ_rows δ come out of the weight gradients'
//   products: the column matrices' last padding column holds ones (δ·1 = δ,
//   summed in the rows' order from 0, as the separate sums did).
// Column (ky, kx, c) of a column matrix holds input (y + ky, x + kx, c).
// Every element of every product is summed over k in the same order as one
// product over the worker's whole batch, whatever the blocking (matmul_acc
// continues each element's chain), and a·b = b·a exactly, so these layouts
// give the bits the whole-batch products gave (compared before and after on
// experiments/real-cnn-fashion under each BITLAB_ISA: docs/building.md).
// Max pooling takes each window's first maximum (a later element must be
// strictly greater); the backward pass finds it again from the stored relu
// output, with the same comparisons, and routes the gradient there (no
// argmax is stored, nothing is zero-filled). Bias, relu, pooling and unpooling
// are dispatched kernels (sim/kernels/conv.hpp; 8-float vectors under AVX2 and
// AVX-512), the NCHW ↔ NHWC transposes run on 4-float vectors (selects, moves
// and one addition each: exact in any lane). Checked by finite differences in
// tests/test_real_problems.cpp.
#include <algorithm>
#include <cstring>

#include "problems/classifier.hpp"
#include "problems/real_problems.hpp"
#include "sim/kernels/conv.hpp"
#include "sim/kernels/matmul.hpp"

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

// Samples per block of conv2's products: 4 × 64 rows × 25·c1 columns (205 kB
// for c1 = 8) stay in L2 between im2col and the products.
constexpr Eigen::Index kConv2Samples = 4;
// The column matrices' rows are padded to a multiple of 16 floats (a register
// tile of two AVX2 vectors or four SSE2 ones, or one AVX-512 vector, which
// matmul also runs in place), so that the weight gradients' products run on
// whole tiles or vectors (32 wasted 12 % of conv2's), with at least one column to
// spare: the last column holds ones, so that the weight gradient's product
// also sums the bias gradient, Σ_rows δ·1 = Σ_rows δ in the rows' order from 0
// (x·1 = x exactly: the bits of the former separate sums over δ, which
// spent 20 % of the backward pass's own time in a chain through memory). The
// other padding columns are zero, or for conv1 (one channel) the first 3 may
// hold image values (im2col moves the last 5-float run as 8 floats); their
// results are computed and dropped.
constexpr Eigen::Index kPadCols = 16;

// One convolution + relu + 2×2 max-pool stage's buffers.
struct Stage {
  RowMatrixF out;               // after relu: conv1 NCHW (n·C_out × H·W), conv2 NHWC
  RowMatrixF pooled;            // (n·Ho/2·Wo/2) × C_out, NHWC
  RowMatrixF dout;              // gradient w.r.t. out (pre-relu after masking)
};

struct CnnWorkspace final : ClassifierWorkspace {
  Stage s1, s2;
  // One sample's or block's column matrices (cache-sized, reused; one each so
  // that none is reallocated between the stages).
  RowMatrixF cols1_t;  // conv1 forward: K1 × 576
  RowMatrixF cols1;    // conv1 backward: 576 × padded(K1)
  RowMatrixF cols2;    // conv2: kConv2Samples·64 × padded(K2) (forward: the first K2)
  RowMatrixF dcols2;   // gradient w.r.t. a block of conv2's columns
  RowMatrixF dflat;   // n × 16·c2
  RowMatrixF dpool1;  // gradient w.r.t. stage 1's pooled output
  std::vector<float> dw;  // a weight gradient with padded rows
  std::vector<float> planes;  // one sample's pooled conv1 output or its gradient, NCHW
  std::vector<float> w2_padded;  // W2 with rows padded to padded(K2)
};

// A column matrix's width for `cols` columns: whole register tiles of every
// instruction set, the last column (never one of the `cols`) for the ones.
Eigen::Index padded(Eigen::Index cols) { return (cols + kPadCols) / kPadCols * kPadCols; }

// A rows × padded(cols) column matrix: zeros, the last column ones.
void make_columns(Eigen::Index rows, Eigen::Index cols, RowMatrixF& m) {
  if (m.rows() == rows && m.cols() == padded(cols)) return;  // kept from the last call
  m.setZero(rows, padded(cols));
  m.col(m.cols() - 1).setOnes();
}

// The transposes below work on vectors of 4 floats (GCC's vector extensions,
// SSE2 in this build; the compiler did not vectorise them). im2col, col2im,
// bias-relu and the pooling, most of the data movement, are dispatched
// kernels (sim/kernels/conv.hpp: a 40-float run is 5 AVX2 or AVX-512 moves).
typedef float F4 __attribute__((vector_size(16)));
inline F4 load4(const float* p) {
  F4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, const F4& v) { std::memcpy(p, &v, sizeof v); }

// to (cols × rows) = fromᵀ (from: rows × cols, both dense), 4 × 4 blocks in
// registers where both sides are multiples of 4.
void transpose(const float* from, Eigen::Index rows, Eigen::Index cols, float* to) {
  if (rows % 4 != 0 || cols % 4 != 0) {
    for (Eigen::Index r = 0; r < rows; ++r)
      for (Eigen::Index c = 0; c < cols; ++c) to[c * rows + r] = from[r * cols + c];
    return;
  }
  for (Eigen::Index r = 0; r < rows; r += 4) {
    for (Eigen::Index c = 0; c < cols; c += 4) {
      const float* f = from + r * cols + c;
      const F4 a = load4(f), b = load4(f + cols), x = load4(f + 2 * cols),
               y = load4(f + 3 * cols);
      const F4 ab0 = __builtin_shufflevector(a, b, 0, 4, 1, 5),
               ab1 = __builtin_shufflevector(a, b, 2, 6, 3, 7),
               xy0 = __builtin_shufflevector(x, y, 0, 4, 1, 5),
               xy1 = __builtin_shufflevector(x, y, 2, 6, 3, 7);
      float* t = to + c * rows + r;
      store4(t, __builtin_shufflevector(ab0, xy0, 0, 1, 4, 5));
      store4(t + rows, __builtin_shufflevector(ab0, xy0, 2, 3, 6, 7));
      store4(t + 2 * rows, __builtin_shufflevector(ab1, xy1, 0, 1, 4, 5));
      store4(t + 3 * rows, __builtin_shufflevector(ab1, xy1, 2, 3, 6, 7));
    }
  }
}

// im2col of n samples of size h × w × c (NHWC, contiguous) for a k×k kernel,
// into rows of padded(k·k·c) columns, the columns past k·k·c as make_columns
// sets them (never written after).
void columns(const float* in, Eigen::Index n, Eigen::Index h, Eigen::Index w, Eigen::Index c,
             RowMatrixF& cols) {
  const Eigen::Index ho = h - kKernel + 1, wo = w - kKernel + 1, taps = kKernel * kKernel * c;
  make_columns(n * ho * wo, taps, cols);
  im2col({size_t(n), size_t(h), size_t(w), size_t(c), size_t(kKernel), size_t(cols.cols())}, in,
         cols.data());
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
  // workers would only multiply the workspace.
  size_t pass_samples() const override { return 1; }

  void backward(std::span<const float> x, std::span<const WorkerRows> workers,
                Workspace& workspace) const override {
    auto& ws = static_cast<CnnWorkspace&>(workspace);
    const Eigen::Index n = ws.rows.rows();
    const RowMatrixF& dlogits = ws.logits;

    // fc.
    const Eigen::Map<const RowMatrixF> flat_in(ws.s2.pooled.data(), n, flat());
    worker_layer_grads(workers, dlogits, flat_in, 1, tensors_[4].offset, tensors_[5].offset);
    ws.dflat.resize(n, flat());
    matmul_nn(dlogits, param_map(x, 4, data_.classes, flat()), ws.dflat);

    // Stage 2: unpool, relu, conv (∇W, ∇b per worker; δcols, col2im onto
    // pooled 1 for every sample).
    unpool_relu2(ws.dflat.data(), ws.s2);
    for (const WorkerRows& w : workers) conv2_weight_grads(w, ws);
    conv2_input_grads(x, n, ws);

    // Stage 1: unpool, relu, conv (∇W, ∇b; the input needs no gradient), a
    // sample at a time (its δ1 stays in L1 from the unpooling to the product).
    ws.s1.dout.resize(ws.s1.out.rows(), ws.s1.out.cols());
    for (const WorkerRows& w : workers) conv1_weight_grads(w, ws);
  }

 protected:
  void forward_logits(std::span<const float> x, const RowMatrixF& rows, Workspace& workspace,
                      RowMatrixF& logits) const override {
    auto& ws = static_cast<CnnWorkspace&>(workspace);
    const Eigen::Index n = rows.rows();
    conv1_forward(x, rows.data(), n, ws);
    conv2_forward(x, n, ws);
    const Eigen::Map<const RowMatrixF> flat_in(ws.s2.pooled.data(), n, flat());
    logits.resize(n, data_.classes);
    matmul_nt(flat_in, param_map(x, 4, data_.classes, flat()), logits, ws.packed);
    add_to_rows(logits, param_vec(x, 5).data());
  }

 private:
  Eigen::Index flat() const { return p2_ * p2_ * c2_; }
  Eigen::Index k1() const { return kKernel * kKernel; }  // conv1's taps (one input channel)
  Eigen::Index k2() const { return kKernel * kKernel * c1_; }

  Eigen::Map<const RowMatrixF> param_map(std::span<const float> x, size_t t, Eigen::Index r,
                                         Eigen::Index c) const {
    return Eigen::Map<const RowMatrixF>(x.data() + tensors_[t].offset, r, c);
  }
  Eigen::Map<const Eigen::VectorXf> param_vec(std::span<const float> x, size_t t) const {
    return Eigen::Map<const Eigen::VectorXf>(x.data() + tensors_[t].offset,
                                             Eigen::Index(tensors_[t].size));
  }

  // conv1 → relu → pool, a sample at a time (its output, 18 kB for c1 = 8,
  // stays in L1 from the product to the pooling): out1 (NCHW) = W1 · colsᵀ + b.
  void conv1_forward(std::span<const float> x, const float* in, Eigen::Index n,
                     CnnWorkspace& ws) const {
    const Eigen::Index pixels = h1_ * h1_, cells = p1_ * p1_;
    const float* w1 = x.data() + tensors_[0].offset;
    const float* b1 = x.data() + tensors_[1].offset;
    ws.s1.out.resize(n * c1_, pixels);
    ws.s1.pooled.resize(n * cells, c1_);
    ws.planes.resize(size_t(c1_ * cells));
    for (Eigen::Index s = 0; s < n; ++s) {
      ws.cols1_t.resize(k1(), pixels);
      im2col_t(size_t(h0_), size_t(h0_), size_t(kKernel), in + s * h0_ * h0_, ws.cols1_t.data());
      float* out = ws.s1.out.data() + s * c1_ * pixels;
      matmul(size_t(c1_), size_t(pixels), size_t(k1()), w1, k1(), 1, ws.cols1_t.data(),
             size_t(pixels), out, size_t(pixels));
      for (Eigen::Index c = 0; c < c1_; ++c) {
        float* plane = out + c * pixels;
        bias_relu(plane, size_t(pixels), b1[c]);
        max_pool_plane(plane, size_t(h1_), size_t(h1_), ws.planes.data() + c * cells);
      }
      transpose(ws.planes.data(), c1_, cells, ws.s1.pooled.data() + s * cells * c1_);
    }
  }

  // conv2 → relu → pool, kConv2Samples samples at a time (the block's column
  // matrix and output stay in L2): out2 = cols · W2ᵀ + b.
  void conv2_forward(std::span<const float> x, Eigen::Index n, CnnWorkspace& ws) const {
    const Eigen::Index rows2 = h2_ * h2_, cells = p2_ * p2_;
    const float* b2 = x.data() + tensors_[3].offset;
    transpose_into(x.data() + tensors_[2].offset, size_t(c2_), size_t(k2()), size_t(k2()),
                   ws.packed);
    ws.s2.out.resize(n * rows2, c2_);
    ws.s2.pooled.resize(n * cells, c2_);
    for (Eigen::Index s0 = 0; s0 < n; s0 += kConv2Samples) {
      const Eigen::Index count = std::min(kConv2Samples, n - s0);
      columns(ws.s1.pooled.data() + s0 * p1_ * p1_ * c1_, count, p1_, p1_, c1_, ws.cols2);
      float* out = ws.s2.out.data() + s0 * rows2 * c2_;
      matmul(size_t(count * rows2), size_t(c2_), size_t(k2()), ws.cols2.data(), ws.cols2.cols(), 1,
             ws.packed.data(), size_t(c2_), out, size_t(c2_));
      bias_relu_rows(out, size_t(count * rows2), size_t(c2_), b2);
      for (Eigen::Index s = 0; s < count; ++s) {
        max_pool_nhwc(out + s * rows2 * c2_, size_t(h2_), size_t(h2_), size_t(c2_),
                      ws.s2.pooled.data() + (s0 + s) * cells * c2_);
      }
    }
  }

  // Worker w's ∇W2 = δ2ᵀ · cols over its samples, block by block (the column
  // matrix made again), and ∇b2 = Σ of δ2 over its rows (the ones column).
  void conv2_weight_grads(const WorkerRows& w, CnnWorkspace& ws) const {
    const Eigen::Index rows2 = h2_ * h2_, ld = padded(k2());
    ws.dw.assign(size_t(c2_ * ld), 0.0f);
    for (Eigen::Index s0 = w.begin; s0 < w.begin + w.count; s0 += kConv2Samples) {
      const Eigen::Index count = std::min(kConv2Samples, w.begin + w.count - s0);
      columns(ws.s1.pooled.data() + s0 * p1_ * p1_ * c1_, count, p1_, p1_, c1_, ws.cols2);
      matmul_acc(size_t(c2_), size_t(ld), size_t(count * rows2),
                 ws.s2.dout.data() + s0 * rows2 * c2_, 1, c2_, ws.cols2.data(), size_t(ld),
                 ws.dw.data(), size_t(ld));
    }
    unpad_rows(ws.dw.data(), c2_, k2(), w.g.data() + tensors_[2].offset,
               w.g.data() + tensors_[3].offset);
  }

  // δcols = δ2 · W2, block by block, scattered onto pooled 1 by col2im. W2's
  // rows are padded with zeros to padded(K2) (whole tiles, as the column
  // matrices; the padding's columns of δcols are computed and never read).
  void conv2_input_grads(std::span<const float> x, Eigen::Index n, CnnWorkspace& ws) const {
    const Eigen::Index rows2 = h2_ * h2_, ld = padded(k2());
    const float* w2 = x.data() + tensors_[2].offset;
    ws.w2_padded.assign(size_t(c2_ * ld), 0.0f);
    for (Eigen::Index c = 0; c < c2_; ++c) {
      std::copy_n(w2 + c * k2(), k2(), ws.w2_padded.data() + c * ld);
    }
    ws.dpool1.resize(ws.s1.pooled.rows(), c1_);
    for (Eigen::Index s0 = 0; s0 < n; s0 += kConv2Samples) {
      const Eigen::Index count = std::min(kConv2Samples, n - s0);
      ws.dcols2.resize(count * rows2, ld);
      matmul(size_t(count * rows2), size_t(ld), size_t(c2_), ws.s2.dout.data() + s0 * rows2 * c2_,
             c2_, 1, ws.w2_padded.data(), size_t(ld), ws.dcols2.data(), size_t(ld));
      col2im({size_t(count), size_t(p1_), size_t(p1_), size_t(c1_), size_t(kKernel), size_t(ld)},
             ws.dcols2.data(), ws.dpool1.data() + s0 * p1_ * p1_ * c1_);
    }
  }

  // Worker w's ∇W1 = δ1ᵀ · cols, sample after sample (δ1 NCHW: a channel's
  // 576 pixels are contiguous), and ∇b1 = Σ of δ1 over its pixels (the ones
  // column), in the order of the rows (sample, y, x).
  void conv1_weight_grads(const WorkerRows& w, CnnWorkspace& ws) const {
    const Eigen::Index pixels = h1_ * h1_, ld = padded(k1());
    ws.dw.assign(size_t(c1_ * ld), 0.0f);
    for (Eigen::Index s = w.begin; s < w.begin + w.count; ++s) {
      unpool_relu1(ws.dpool1.data(), s, ws);
      columns(ws.rows.data() + s * h0_ * h0_, 1, h0_, h0_, 1, ws.cols1);
      const float* d = ws.s1.dout.data() + s * c1_ * pixels;
      matmul_acc(size_t(c1_), size_t(ld), size_t(pixels), d, pixels, 1, ws.cols1.data(),
                 size_t(ld), ws.dw.data(), size_t(ld));
    }
    unpad_rows(ws.dw.data(), c1_, k1(), w.g.data() + tensors_[0].offset,
               w.g.data() + tensors_[1].offset);
  }

  // rows × cols of a matrix whose rows are padded(cols) long into a dense
  // one, and each row's last column (the bias gradient) into bias[row].
  static void unpad_rows(const float* from, Eigen::Index rows, Eigen::Index cols, float* to,
                         float* bias) {
    const Eigen::Index ld = padded(cols);
    for (Eigen::Index r = 0; r < rows; ++r) {
      std::copy_n(from + r * ld, cols, to + r * cols);
      bias[r] = from[r * ld + ld - 1];
    }
  }

  // Sample s's stage-1 δ (NCHW, as out1; ws.s1.dout has its shape) from the
  // gradient w.r.t. its pooled output (NHWC), through NCHW planes.
  void unpool_relu1(const float* dpooled, Eigen::Index s, CnnWorkspace& ws) const {
    const Eigen::Index pixels = h1_ * h1_, cells = p1_ * p1_;
    ws.planes.resize(size_t(c1_ * cells));
    transpose(dpooled + s * cells * c1_, cells, c1_, ws.planes.data());
    for (Eigen::Index c = 0; c < c1_; ++c) {
      const Eigen::Index plane = (s * c1_ + c) * pixels;
      unpool_relu_plane(ws.s1.out.data() + plane, size_t(h1_), size_t(h1_),
                        ws.planes.data() + c * cells, ws.s1.dout.data() + plane);
    }
  }

  // Stage 2's δ (NHWC, as out2) from the gradient w.r.t. its pooled output.
  void unpool_relu2(const float* dpooled, Stage& st) const {
    const Eigen::Index rows2 = h2_ * h2_, cells = p2_ * p2_, n = st.pooled.rows() / cells;
    st.dout.resize(st.out.rows(), st.out.cols());
    for (Eigen::Index s = 0; s < n; ++s) {
      unpool_relu_nhwc(st.out.data() + s * rows2 * c2_, size_t(h2_), size_t(h2_), size_t(c2_),
                       dpooled + s * cells * c2_, st.dout.data() + s * rows2 * c2_);
    }
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
