// transformer: the network (forward and hand-written backward over the whole
// batch, or several workers' batches at once, with the fixed-order products of
// sim/kernels/matmul.hpp; Eigen's in double for the tests) and the problem
// wrapping it (see
// transformer.hpp for the architecture). tests/test_transformer.cpp checks the
// gradient against central finite differences in double for coordinates of
// every tensor.
#include "problems/transformer.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <type_traits>

#include "problems/row_ops.hpp"
#include "problems/synthetic.hpp"
#include "problems/text_corpus.hpp"
#include "sim/kernels/activations.hpp"
#include "sim/kernels/det_math.hpp"
#include "sim/kernels/matmul.hpp"

namespace bitlab {

namespace {

// Per-block tensor order (see transformer_tensors).
enum BlockTensor : size_t {
  kLn1Gain,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kProjWeight,
  kProjBias,
  kLn2Gain,
  kLn2Bias,
  kFcWeight,
  kFcBias,
  kMlpProjWeight,
  kMlpProjBias,
  kPerBlock
};
constexpr size_t kTokEmb = 0, kPosEmb = 1, kFirstBlock = 2;

// Layer-norm epsilon (PyTorch's and GPT-2's default).
constexpr double kLnEps = 1e-5;
// sqrt(2/π), GPT-2's tanh approximation of GELU.
constexpr double kGeluC = 0.7978845608028654;
constexpr double kGeluA = 0.044715;

template <class S>
struct TransformerWorkspace final : Workspace {
  using Matrix = typename TransformerNet<S>::Matrix;
  using Vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;
  // What the forward pass keeps for the backward pass, per block.
  struct Block {
    Matrix xhat1, a1;  // N × d: normalised input of LN1, LN1 output
    Vector rstd1;      // N: 1/sqrt(var + eps) of LN1
    Matrix qkv;        // N × 3d
    Matrix probs;      // (windows·heads·T) × T: attention probabilities, 0 above the diagonal
    Matrix att;        // N × d: heads' outputs side by side
    Matrix xhat2, a2;  // N × d
    Vector rstd2;      // N
    Matrix pre, act;   // N × (mlp_ratio·d): MLP pre-activation and GELU output
  };
  std::vector<int32_t> windows;  // the problem's copy of the batch's tokens
  std::vector<Block> blocks;
  Matrix h;          // N × d: the residual stream, then dloss/dh in the backward pass
  Matrix xhatf, af;  // final layer norm
  Vector rstdf;
  Matrix logits;   // N × vocab
  Matrix dlogits;  // N × vocab
  Matrix da, dqkv, datt, dpre, dprobs;
  Matrix product;            // N × d: a projection before it is added to h
  Vector row;                // d: one row's dloss/dxhat
  std::vector<float> packed;  // a transposed operand (matmul_nt)
  std::vector<typename TransformerNet<S>::Group> groups;  // loss_grad_workers' workers
};

// c = a·b, c = aᵀ·b and c = a·bᵀ: float through sim/kernels/matmul.hpp (fixed
// order; the runs), double through Eigen (the finite-difference tests).
template <class A, class B, class C>
void prod_nn(const A& a, const B& b, C&& c, std::vector<float>& /*scratch*/) {
  if constexpr (std::is_same_v<typename A::Scalar, float>) {
    matmul_nn(a, b, c);
  } else {
    c.noalias() = a * b;
  }
}
template <class A, class B, class C>
void prod_tn(const A& a, const B& b, C&& c, std::vector<float>& /*scratch*/) {
  if constexpr (std::is_same_v<typename A::Scalar, float>) {
    matmul_tn(a, b, c);
  } else {
    c.noalias() = a.transpose() * b;
  }
}
template <class A, class B, class C>
void prod_nt(const A& a, const B& b, C&& c, std::vector<float>& scratch) {
  if constexpr (std::is_same_v<typename A::Scalar, float>) {
    matmul_nt(a, b, c, scratch);
  } else {
    c.noalias() = a * b.transpose();
  }
}

// out = LN(x)·gain + bias row by row; keeps xhat and rstd for the backward.
template <class S, class Gain>
void layer_norm(const typename TransformerNet<S>::Matrix& x, const Gain& gain, const Gain& bias,
                typename TransformerNet<S>::Matrix& xhat, Eigen::Matrix<S, Eigen::Dynamic, 1>& rstd,
                typename TransformerNet<S>::Matrix& out) {
  const Eigen::Index n = x.rows(), d = x.cols();
  xhat.resize(n, d);
  out.resize(n, d);
  rstd.resize(n);
  for (Eigen::Index r = 0; r < n; ++r) {
    const S mu = sum_of(x.row(r).data(), d) / static_cast<S>(d);
    xhat.row(r).array() = x.row(r).array() - mu;
    const S var = dot_of(xhat.row(r).data(), xhat.row(r).data(), d) / static_cast<S>(d);
    rstd(r) = static_cast<S>(1.0 / std::sqrt(static_cast<double>(var) + kLnEps));
    xhat.row(r) *= rstd(r);
    out.row(r).array() = xhat.row(r).array() * gain.array() + bias.array();
  }
}

// Backward of layer_norm: ADDS dloss/dx into dx (row by row; `dxhat` is a
// d-vector of scratch). The gain and bias gradients are per worker (the
// layer_norm_grads step of loss_groups).
template <class S, class Gain>
void layer_norm_backward(const typename TransformerNet<S>::Matrix& dout,
                         const typename TransformerNet<S>::Matrix& xhat,
                         const Eigen::Matrix<S, Eigen::Dynamic, 1>& rstd, const Gain& gain,
                         Eigen::Matrix<S, Eigen::Dynamic, 1>& dxhat,
                         typename TransformerNet<S>::Matrix& dx) {
  const Eigen::Index d = dout.cols();
  dxhat.resize(d);
  for (Eigen::Index r = 0; r < dout.rows(); ++r) {
    dxhat.array() = dout.row(r).transpose().array() * gain.transpose().array();
    const S m1 = sum_of(dxhat.data(), d) / static_cast<S>(d);
    const S m2 = dot_of(dxhat.data(), xhat.row(r).data(), d) / static_cast<S>(d);
    dx.row(r).array() +=
        rstd(r) * (dxhat.transpose().array() - m1 - xhat.row(r).array() * m2);
  }
}

// One pass of loss_groups over every group's windows: the forward pass, the
// loss per group, and the backward pass, each a named step over the blocks.
// The members are the names the steps share (dimensions, the parameter and
// gradient views); each step is the code the former single function ran, in
// the same order, so the bits are the same.
template <class S>
class TransformerPass {
 public:
  using Net = TransformerNet<S>;
  using Matrix = typename Net::Matrix;
  using Group = typename Net::Group;
  using Vector = Eigen::Matrix<S, Eigen::Dynamic, 1>;

  TransformerPass(const TransformerShape& shape, const std::vector<TensorInfo>& tensors,
                  std::span<const S> x, std::span<const int32_t> windows, std::span<Group> groups,
                  TransformerWorkspace<S>& ws)
      : shape_(shape), tensors_(tensors), x_(x), windows_(windows), groups_(groups), ws_(ws),
        T(shape.context), d(shape.d_model), H(shape.heads), dh(d / H), V(shape.vocab),
        F(shape.mlp_ratio * shape.d_model), B(total_windows(groups)), N(B * T),
        ln_f(kFirstBlock + kPerBlock * static_cast<size_t>(shape.layers)),
        scale(static_cast<S>(1.0 / std::sqrt(static_cast<double>(dh)))), scratch(ws.packed) {}

  // Embeddings, the blocks, the final layer norm and the logits.
  void forward() {
    embed();
    ws_.blocks.resize(static_cast<size_t>(shape_.layers));
    for (int64_t l = 0; l < shape_.layers; ++l) {
      attention_forward(l);
      mlp_forward(l);
    }
    layer_norm<S>(ws_.h, vec(ln_f), vec(ln_f + 1), ws_.xhatf, ws_.rstdf, ws_.af);
    ws_.logits.resize(N, V);
    prod_nt(ws_.af, mat(ln_f + 2, V, d), ws_.logits, scratch);
  }

  // Each group's mean loss (log-sum-exp in double, shifted by the row
  // maximum) and, when gradients are asked for, dloss/dlogits. Returns
  // whether a backward pass follows.
  bool loss_per_group() {
    const bool grad = !groups_.empty() && !groups_.front().g.empty();
    if (grad) ws_.dlogits.resize(N, V);
    for_groups([&](Group& grp, Eigen::Index begin, Eigen::Index rows) {
      grp.loss = group_loss(begin, rows, grad);
    });
    for (Group& grp : groups_) {
      if (grp.count == 0) {
        grp.loss = 0.0;
        std::fill(grp.g.begin(), grp.g.end(), S(0));
      }
    }
    return grad && N > 0;
  }

  // Input gradients over all rows, parameter gradients per group.
  void backward() {
    weight_grads(ws_.dlogits, ws_.af, ln_f + 2, V, d, false);
    ws_.da.resize(N, d);
    prod_nn(ws_.dlogits, mat(ln_f + 2, V, d), ws_.da, scratch);
    ws_.h.setZero();  // from here on: dloss/dh
    layer_norm_grads(ws_.da, ws_.xhatf, ws_.rstdf, ln_f);
    for (int64_t l = shape_.layers - 1; l >= 0; --l) {
      mlp_backward(l);
      attention_backward(l);
    }
    embed_backward();
  }

 private:
  using CMat = Eigen::Map<const Matrix>;
  using CVec = Eigen::Map<const Eigen::Matrix<S, 1, Eigen::Dynamic>>;
  using GMat = Eigen::Map<Matrix>;

  static Eigen::Index total_windows(std::span<Group> groups) {
    Eigen::Index b = 0;
    for (const Group& grp : groups) b += static_cast<Eigen::Index>(grp.count);
    return b;
  }
  CMat mat(size_t k, Eigen::Index rows, Eigen::Index cols) const {
    return CMat(x_.data() + tensors_[k].offset, rows, cols);
  }
  CVec vec(size_t k) const {
    return CVec(x_.data() + tensors_[k].offset, static_cast<Eigen::Index>(tensors_[k].size));
  }
  GMat gmat(const Group& grp, size_t k, Eigen::Index rows, Eigen::Index cols) const {
    return GMat(grp.g.data() + tensors_[k].offset, rows, cols);
  }
  S* gptr(const Group& grp, size_t k) const { return grp.g.data() + tensors_[k].offset; }
  static size_t blk(int64_t l, size_t role) { return kFirstBlock + kPerBlock * l + role; }
  int32_t token(Eigen::Index b, Eigen::Index t) const { return windows_[b * (T + 1) + t]; }

  // Window b's query, key and value columns of head hd: T × dh blocks of qkv.
  auto head_qkv(const Matrix& qkv, Eigen::Index b, Eigen::Index hd) const {
    return std::tuple{qkv.block(b * T, hd * dh, T, dh), qkv.block(b * T, d + hd * dh, T, dh),
                      qkv.block(b * T, 2 * d + hd * dh, T, dh)};
  }
  // For each group, its rows [begin, begin + rows) of the N token rows.
  template <class Fn>
  void for_groups(Fn&& f) {
    Eigen::Index begin = 0;
    for (Group& grp : groups_) {
      const Eigen::Index rows = static_cast<Eigen::Index>(grp.count) * T;
      if (rows > 0) f(grp, begin, rows);
      begin += rows;
    }
  }
  // h += a·Wᵀ + bias (the residual branches' projections).
  void add_projection(const Matrix& a, size_t w, Eigen::Index rows, Eigen::Index cols) {
    ws_.product.resize(N, rows);
    prod_nt(a, mat(w, rows, cols), ws_.product, scratch);
    add_to_rows(ws_.product, vec(w + 1));
    ws_.h += ws_.product;
  }

  // h = token embedding + position embedding, row by row.
  void embed() {
    const CMat tok = mat(kTokEmb, V, d), pos = mat(kPosEmb, T, d);
    ws_.h.resize(N, d);
    for (Eigen::Index b = 0; b < B; ++b) {
      for (Eigen::Index t = 0; t < T; ++t) ws_.h.row(b * T + t) = tok.row(token(b, t)) + pos.row(t);
    }
  }

  // Block l's attention half: h += Attention(LN1(h))·Wprojᵀ + bproj.
  void attention_forward(int64_t l) {
    auto& L = ws_.blocks[static_cast<size_t>(l)];
    layer_norm<S>(ws_.h, vec(blk(l, kLn1Gain)), vec(blk(l, kLn1Bias)), L.xhat1, L.rstd1, L.a1);
    L.qkv.resize(N, 3 * d);
    prod_nt(L.a1, mat(blk(l, kQkvWeight), 3 * d, d), L.qkv, scratch);
    add_to_rows(L.qkv, vec(blk(l, kQkvBias)));
    // Causal self-attention, one (window, head) at a time: P = softmax(Q·Kᵀ/√dh)
    // over keys j ≤ i, output P·V.
    L.probs.resize(B * H * T, T);
    L.att.resize(N, d);
    for (Eigen::Index b = 0; b < B; ++b) {
      for (Eigen::Index hd = 0; hd < H; ++hd) {
        const auto [q, k, v] = head_qkv(L.qkv, b, hd);
        auto p = L.probs.block((b * H + hd) * T, 0, T, T);
        prod_nt(q, k, p, scratch);
        for (Eigen::Index i = 0; i < T; ++i) softmax_row(p.row(i).data(), i);
        prod_nn(p, v, L.att.block(b * T, hd * dh, T, dh), scratch);
      }
    }
    add_projection(L.att, blk(l, kProjWeight), d, d);
  }

  // Row i of the scores (scaled here by 1/√dh) becomes its softmax over keys
  // j ≤ i (all keys without the causal mask), 0 beyond. exp() element by
  // element (Eigen's vectorised exp differs from its scalar tail, which moves
  // with alignment), in double with sim/kernels/det_math.hpp's exp (the C
  // library's is chosen at run time by CPU), rounded once.
  void softmax_row(S* row, Eigen::Index i) const {
    const Eigen::Index last = shape_.causal ? i : T - 1;
    S m = row[0] * scale;
    for (Eigen::Index j = 0; j <= last; ++j) {
      row[j] *= scale;
      m = std::max(m, row[j]);
    }
    for (Eigen::Index j = 0; j <= last; ++j) {
      row[j] = static_cast<S>(det_math::exp(static_cast<double>(row[j] - m)));
    }
    const S total = sum_of(row, last + 1);
    for (Eigen::Index j = 0; j <= last; ++j) row[j] /= total;
    for (Eigen::Index j = last + 1; j < T; ++j) row[j] = S(0);
  }

  // Block l's MLP half: h += GELU(LN2(h)·Wfcᵀ + bfc)·Wprojᵀ + bproj.
  void mlp_forward(int64_t l) {
    auto& L = ws_.blocks[static_cast<size_t>(l)];
    layer_norm<S>(ws_.h, vec(blk(l, kLn2Gain)), vec(blk(l, kLn2Bias)), L.xhat2, L.rstd2, L.a2);
    L.pre.resize(N, F);
    prod_nt(L.a2, mat(blk(l, kFcWeight), F, d), L.pre, scratch);
    add_to_rows(L.pre, vec(blk(l, kFcBias)));
    L.act.resize(N, F);
    if constexpr (std::is_same_v<S, float>) {
      gelu_tanh(L.pre.data(), L.act.data(), static_cast<size_t>(L.pre.size()));
    } else {
      L.act = L.pre.unaryExpr([](S z) {
        return static_cast<S>(0.5) * z *
               (S(1) + std::tanh(static_cast<S>(kGeluC) * (z + static_cast<S>(kGeluA) * z * z * z)));
      });
    }
    add_projection(L.act, blk(l, kMlpProjWeight), d, F);
  }

  // The mean next-token loss over rows [begin, begin + rows); with `grad`,
  // their rows of dlogits.
  double group_loss(Eigen::Index begin, Eigen::Index rows, bool grad) {
    double loss = 0.0;
    const double inv_n = 1.0 / static_cast<double>(rows);
    for (Eigen::Index r = begin; r < begin + rows; ++r) {
      const Eigen::Index b = r / T, t = r % T;
      const int32_t y = token(b, t + 1);
      const double m = ws_.logits.row(r).maxCoeff();
      double s = 0.0;
      for (Eigen::Index c = 0; c < V; ++c) s += det_math::exp(double(ws_.logits(r, c)) - m);
      const double lse = m + det_math::log(s);
      loss += lse - double(ws_.logits(r, y));
      if (grad) {
        for (Eigen::Index c = 0; c < V; ++c) {
          const double p = det_math::exp(double(ws_.logits(r, c)) - lse);
          ws_.dlogits(r, c) = static_cast<S>((p - (c == y ? 1.0 : 0.0)) * inv_n);
        }
      }
    }
    return loss * inv_n;
  }

  // The weight gradient of y = a·Wᵀ (W: rows × cols) from dy, and the bias's.
  void weight_grads(const Matrix& dy, const Matrix& a, size_t w, Eigen::Index rows,
                    Eigen::Index cols, bool bias) {
    for_groups([&](const Group& grp, Eigen::Index begin, Eigen::Index n) {
      prod_tn(dy.middleRows(begin, n), a.middleRows(begin, n), gmat(grp, w, rows, cols), scratch);
      if (bias) sum_rows(dy, begin, n, gptr(grp, w + 1));
    });
  }
  // Layer norm's gain and bias gradients (tensors k, k + 1) and dh += ….
  void layer_norm_grads(const Matrix& dout, const Matrix& xhat, const Vector& rstd, size_t k) {
    for_groups([&](const Group& grp, Eigen::Index begin, Eigen::Index n) {
      sum_rows(dout, begin, n, gptr(grp, k), &xhat);
      sum_rows(dout, begin, n, gptr(grp, k + 1));
    });
    layer_norm_backward<S>(dout, xhat, rstd, vec(k), ws_.row, ws_.h);
  }

  // MLP: h_out = h_mid + GELU(LN2(h_mid)·Wfcᵀ + bfc)·Wprojᵀ + bproj.
  void mlp_backward(int64_t l) {
    auto& L = ws_.blocks[static_cast<size_t>(l)];
    weight_grads(ws_.h, L.act, blk(l, kMlpProjWeight), d, F, true);
    ws_.dpre.resize(N, F);
    prod_nn(ws_.h, mat(blk(l, kMlpProjWeight), d, F), ws_.dpre, scratch);
    if constexpr (std::is_same_v<S, float>) {
      gelu_tanh_backward(L.pre.data(), ws_.dpre.data(), static_cast<size_t>(L.pre.size()));
    } else {
      ws_.dpre.array() *=
          L.pre
              .unaryExpr([](S z) {
                const S u = static_cast<S>(kGeluC) * (z + static_cast<S>(kGeluA) * z * z * z);
                const S th = std::tanh(u);
                const S du =
                    static_cast<S>(kGeluC) * (S(1) + static_cast<S>(3.0 * kGeluA) * z * z);
                return static_cast<S>(0.5) * (S(1) + th) +
                       static_cast<S>(0.5) * z * (S(1) - th * th) * du;
              })
              .array();
    }
    weight_grads(ws_.dpre, L.a2, blk(l, kFcWeight), F, d, true);
    prod_nn(ws_.dpre, mat(blk(l, kFcWeight), F, d), ws_.da, scratch);
    layer_norm_grads(ws_.da, L.xhat2, L.rstd2, blk(l, kLn2Gain));
  }

  // Attention: h_mid = h_in + att·Wprojᵀ + bproj.
  void attention_backward(int64_t l) {
    auto& L = ws_.blocks[static_cast<size_t>(l)];
    weight_grads(ws_.h, L.att, blk(l, kProjWeight), d, d, true);
    ws_.datt.resize(N, d);
    prod_nn(ws_.h, mat(blk(l, kProjWeight), d, d), ws_.datt, scratch);
    ws_.dqkv.resize(N, 3 * d);
    ws_.dprobs.resize(T, T);
    for (Eigen::Index b = 0; b < B; ++b) {
      for (Eigen::Index hd = 0; hd < H; ++hd) head_backward(L, b, hd);
    }
    weight_grads(ws_.dqkv, L.a1, blk(l, kQkvWeight), 3 * d, d, true);
    prod_nn(ws_.dqkv, mat(blk(l, kQkvWeight), 3 * d, d), ws_.da, scratch);
    layer_norm_grads(ws_.da, L.xhat1, L.rstd1, blk(l, kLn1Gain));
  }

  // Window b, head hd: dV, then the softmax backward dS = P ∘ (dP −
  // rowsum(dP ∘ P)), times the 1/√dh of the scores (masked entries have P = 0
  // and get dS = 0), then dQ and dK.
  void head_backward(const typename TransformerWorkspace<S>::Block& L, Eigen::Index b,
                     Eigen::Index hd) {
    const auto [q, k, v] = head_qkv(L.qkv, b, hd);
    const auto p = L.probs.block((b * H + hd) * T, 0, T, T);
    const auto dy = ws_.datt.block(b * T, hd * dh, T, dh);
    prod_tn(p, dy, ws_.dqkv.block(b * T, 2 * d + hd * dh, T, dh), scratch);
    prod_nt(dy, v, ws_.dprobs, scratch);
    for (Eigen::Index i = 0; i < T; ++i) {
      const S s = dot_of(ws_.dprobs.row(i).data(), p.row(i).data(), T);
      ws_.dprobs.row(i).array() = p.row(i).array() * (ws_.dprobs.row(i).array() - s) * scale;
    }
    prod_nn(ws_.dprobs, k, ws_.dqkv.block(b * T, hd * dh, T, dh), scratch);
    prod_tn(ws_.dprobs, q, ws_.dqkv.block(b * T, d + hd * dh, T, dh), scratch);
  }

  // Embeddings: scatter-add dloss/dh_0 into the rows that were looked up.
  void embed_backward() {
    for_groups([&](const Group& grp, Eigen::Index begin, Eigen::Index n) {
      GMat dtok = gmat(grp, kTokEmb, V, d), dpos = gmat(grp, kPosEmb, T, d);
      dtok.setZero();
      dpos.setZero();
      for (Eigen::Index r = begin; r < begin + n; ++r) {
        const Eigen::Index b = r / T, t = r % T;
        dtok.row(token(b, t)) += ws_.h.row(r);
        dpos.row(t) += ws_.h.row(r);
      }
    });
  }

  const TransformerShape& shape_;
  const std::vector<TensorInfo>& tensors_;
  std::span<const S> x_;
  std::span<const int32_t> windows_;
  std::span<Group> groups_;
  TransformerWorkspace<S>& ws_;
  // Context, model width, heads, head width, vocabulary, MLP width, windows,
  // token rows; the final layer norm's first tensor; 1/√dh.
  const Eigen::Index T, d, H, dh, V, F, B, N;
  const size_t ln_f;
  const S scale;
  std::vector<float>& scratch;
};

}  // namespace

std::vector<TensorInfo> transformer_tensors(const TransformerShape& s) {
  const auto v = static_cast<size_t>(s.vocab), t = static_cast<size_t>(s.context),
             d = static_cast<size_t>(s.d_model), f = static_cast<size_t>(s.mlp_ratio * s.d_model);
  // Shapes as PyTorch's [out, in] (embeddings [rows, d]); 1-D: rows 0.
  std::vector<TensorPart> parts = {{"tok_emb.weight", v * d, v, d},
                                   {"pos_emb.weight", t * d, t, d}};
  for (int64_t l = 0; l < s.layers; ++l) {
    std::string p = "h";
    p += std::to_string(l);
    p += ".";
    for (const TensorPart& part :
         std::initializer_list<TensorPart>{{"ln1.gain", d},
                                           {"ln1.bias", d},
                                           {"attn.qkv.weight", 3 * d * d, 3 * d, d},
                                           {"attn.qkv.bias", 3 * d},
                                           {"attn.proj.weight", d * d, d, d},
                                           {"attn.proj.bias", d},
                                           {"ln2.gain", d},
                                           {"ln2.bias", d},
                                           {"mlp.fc.weight", f * d, f, d},
                                           {"mlp.fc.bias", f},
                                           {"mlp.proj.weight", d * f, d, f},
                                           {"mlp.proj.bias", d}}) {
      parts.push_back({p + part.name, part.size, part.rows, part.cols});
    }
  }
  parts.push_back({"ln_f.gain", d});
  parts.push_back({"ln_f.bias", d});
  parts.push_back({"head.weight", v * d, v, d});
  return make_tensors(parts);
}

double transformer_matmul_flops(const TransformerShape& s, int64_t windows) {
  const double t = static_cast<double>(s.context), d = static_cast<double>(s.d_model),
               r = static_cast<double>(s.mlp_ratio), v = static_cast<double>(s.vocab);
  // Forward, per window: per block qkv (3d²), proj (d²), MLP (2·r·d²) per
  // token, and Q·Kᵀ plus P·V (T²·d each, summed over heads); the head (d·V
  // per token). The backward pass runs two products of the same size for
  // each forward one (input and weight gradients; dP, dV, dQ, dK).
  const double block = 2.0 * t * d * d * (4.0 + 2.0 * r) + 4.0 * t * t * d;
  const double forward = static_cast<double>(s.layers) * block + 2.0 * t * d * v;
  return 3.0 * forward * static_cast<double>(windows);
}

template <class S>
TransformerNet<S>::TransformerNet(const TransformerShape& shape)
    : shape_(shape), tensors_(transformer_tensors(shape)) {}

template <class S>
void TransformerNet<S>::init(std::span<S> x, uint64_t seed, double init_std) const {
  RngStream rng(seed, Purpose::kInit);
  const double residual_std = init_std / std::sqrt(2.0 * static_cast<double>(shape_.layers));
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const TensorInfo& t = tensors_[k];
    const bool in_block = k >= kFirstBlock && k < kFirstBlock + kPerBlock * shape_.layers;
    const size_t role = in_block ? (k - kFirstBlock) % kPerBlock : kPerBlock;
    const bool gain = t.name.ends_with(".gain");
    const bool bias = t.name.ends_with(".bias");
    const double std = (role == kProjWeight || role == kMlpProjWeight) ? residual_std : init_std;
    for (size_t i = 0; i < t.size; ++i) {
      x[t.offset + i] = gain ? S(1) : bias ? S(0) : static_cast<S>(std * rng.next_normal());
    }
  }
}

template <class S>
std::unique_ptr<Workspace> TransformerNet<S>::make_workspace() const {
  return std::make_unique<TransformerWorkspace<S>>();
}

template <class S>
const typename TransformerNet<S>::Matrix& TransformerNet<S>::logits(const Workspace& ws) {
  return static_cast<const TransformerWorkspace<S>&>(ws).logits;
}

template <class S>
double TransformerNet<S>::loss(std::span<const S> x, std::span<const int32_t> windows, size_t count,
                               std::span<S> g, Workspace& workspace) const {
  Group one{count, g};
  loss_groups(x, windows, {&one, 1}, workspace);
  return one.loss;
}

template <class S>
void TransformerNet<S>::loss_groups(std::span<const S> x, std::span<const int32_t> windows,
                                    std::span<Group> groups, Workspace& workspace) const {
  TransformerPass<S> pass(shape_, tensors_, x, windows, groups,
                          static_cast<TransformerWorkspace<S>&>(workspace));
  pass.forward();
  if (pass.loss_per_group()) pass.backward();
}

template class TransformerNet<float>;
template class TransformerNet<double>;

// ---- the problem -----------------------------------------------------------

TransformerOptions::TransformerOptions() : files(default_fortune_files()) {}

Schema<TransformerOptions> TransformerOptions::schema() {
  using O = TransformerOptions;
  return Schema<O>()
      .field("files", &O::files,
             "fortune files (plain text, fortunes separated by lines holding a single %); the "
             "default is the Debian package fortunes-min's three files",
             {Rule<std::vector<std::string>>{
                 [](const std::vector<std::string>& v) { return !v.empty(); },
                 "must name at least one file"}})
      .field(
          "test_fraction", &O::test_fraction,
          "share of the fortunes held out (split by whole fortunes, seeded by data_seed)",
          {Rule<double>{[](const double& v) { return v > 0.0 && v < 1.0; }, "must be in (0, 1)"}})
      .field("context", &O::context, "tokens (characters) per window: the attention span",
             {rules::at_least<int64_t>(2)})
      .field("stride", &O::stride,
             "distance in tokens between the starts of consecutive training windows",
             {rules::at_least<int64_t>(1)})
      .field("d_model", &O::d_model, "width of the residual stream", {rules::at_least<int64_t>(1)})
      .field("layers", &O::layers, "transformer blocks", {rules::at_least<int64_t>(1)})
      .field("heads", &O::heads, "attention heads per block (must divide d_model)",
             {rules::at_least<int64_t>(1)})
      .field("mlp_ratio", &O::mlp_ratio, "MLP hidden width / d_model",
             {rules::at_least<int64_t>(1)})
      .field("init_std", &O::init_std,
             "standard deviation of the initial weights (GPT-2: 0.02; residual projections get "
             "init_std/sqrt(2·layers))",
             {rules::greater(0.0)})
      .field("eval_windows", &O::eval_windows,
             "held-out windows (non-overlapping, from the start of the held-out text) for "
             "eval_loss; as many evenly spaced training windows give train_subset_loss",
             {rules::at_least<int64_t>(1)})
      .field("data_seed", &O::data_seed, "seed of the train/test split of the fortunes")
      .check([](const O& o, const std::string& path) {
        if (o.d_model % o.heads != 0) {
          config_fail(join_path(path, "heads"), o.heads,
                      "must divide d_model = " + std::to_string(o.d_model));
        }
      });
}

namespace {

class Transformer final : public Problem {
 public:
  explicit Transformer(const TransformerOptions& o)
      : corpus_(load_text_corpus({o.files, o.test_fraction, o.data_seed, "problem"})),
        net_(shape_of(o, corpus_.vocab_size())),
        init_std_(o.init_std) {
    const auto T = static_cast<size_t>(o.context);
    const size_t train_len = corpus_.train_tokens.size();
    const size_t held_out = windows(o, corpus_).second;  // refuses too short a text
    for (size_t s = 0; s + T + 1 <= train_len; s += static_cast<size_t>(o.stride)) {
      train_starts_.push_back(s);
    }
    for (size_t k = 0; k < held_out; ++k) test_starts_.push_back(k * T);
    const size_t subset = std::min(static_cast<size_t>(o.eval_windows), train_starts_.size());
    for (size_t k = 0; k < subset; ++k) {
      subset_starts_.push_back(train_starts_[k * train_starts_.size() / subset]);
    }
  }

  // The corpus is read (its vocabulary and length decide the shape; a few
  // hundred kB by default), the network is not built.
  static ProblemShape shape(const TransformerOptions& o, bool tensors) {
    const TextCorpus corpus = load_text_corpus({o.files, o.test_fraction, o.data_seed, "problem"});
    ProblemShape out;
    out.dim = param_count(o, corpus.vocab_size());
    out.num_train = windows(o, corpus).first;
    if (tensors) out.tensors = transformer_tensors(shape_of(o, corpus.vocab_size()));
    return out;
  }

  size_t dim() const override { return net_.dim(); }
  const std::vector<TensorInfo>& tensors() const override { return net_.tensors(); }
  size_t num_train() const override { return train_starts_.size(); }

  void init_params(std::span<float> x, uint64_t seed) const override {
    net_.init(x, seed, init_std_);
  }

  std::unique_ptr<Workspace> make_workspace() const override { return net_.make_workspace(); }

  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& noise, Workspace& workspace) const override {
    WorkerBatch one{batch, g, &noise};
    loss_grad_workers(x, {&one, 1}, workspace);
    return one.loss;
  }

  // A window is already `context` rows of every product: group workers up to
  // 512 rows (one worker's 8 windows of 64 tokens is that; more slowed the
  // step, 78 ms alone against 86 ms for groups of 8 workers, the activations
  // no longer fitting the caches).
  size_t pass_samples() const override {
    return std::max<size_t>(1, 512 / static_cast<size_t>(net_.shape().context));
  }

  // Every worker's windows through one pass (TransformerNet::loss_groups):
  // the products run over all of them, the parameter gradients per worker.
  void loss_grad_workers(std::span<const float> x, std::span<WorkerBatch> workers,
                         Workspace& workspace) const override {
    auto& ws = static_cast<TransformerWorkspace<float>&>(workspace);
    ws.groups.clear();
    size_t total = 0;
    for (const WorkerBatch& w : workers) {
      ws.groups.push_back({w.batch.size(), w.g});
      total += w.batch.size();
    }
    const auto w = static_cast<size_t>(net_.shape().context + 1);
    ws.windows.resize(total * w);
    auto out = ws.windows.begin();
    for (const WorkerBatch& wb : workers) {
      for (const uint32_t sample : wb.batch) {
        out = std::copy_n(corpus_.train_tokens.begin() +
                              static_cast<std::ptrdiff_t>(train_starts_[sample]),
                          w, out);
      }
    }
    net_.loss_groups(x, ws.windows, ws.groups, ws);
    for (size_t k = 0; k < workers.size(); ++k) workers[k].loss = ws.groups[k].loss;
  }

  std::vector<std::string> eval_columns() const override {
    return {"eval_loss", "eval_perplexity", "train_subset_loss"};
  }

  // Mean token loss over fixed windows, in chunks of kEvalChunk windows run
  // in parallel (each chunk's loss is independent of the thread count and
  // the chunks are summed in order, so the result is too).
  void evaluate(std::span<const float> x, std::span<double> out) const override {
    out[0] = mean_loss(x, corpus_.test_tokens, test_starts_);
    out[1] = det_math::exp(out[0]);
    out[2] = mean_loss(x, corpus_.train_tokens, subset_starts_);
  }

  const TextCorpus& corpus() const { return corpus_; }

 private:
  static constexpr size_t kEvalChunk = 16;

  // Refuses a model whose parameter count does not fit in int64 (before
  // transformer_tensors would wrap it).
  static TransformerShape shape_of(const TransformerOptions& o, int32_t vocab) {
    param_count(o, vocab);
    return {vocab, o.context, o.d_model, o.layers, o.heads, o.mlp_ratio, true};
  }

  // transformer_tensors' sizes summed in closed form, checked: 2·V·d
  // (embedding, head) + T·d + 2d (ln_f) + layers · (4d² + 2fd + 9d + f) with
  // f = mlp_ratio · d (per block: ln1, ln2 4d; qkv 3d² + 3d; proj d² + d;
  // mlp fc fd + f, proj fd + d). The `problems` suite checks it against the
  // built network. A count over int64 blames d_model (or layers).
  static size_t param_count(const TransformerOptions& o, int32_t vocab) {
    const ParamBlame blame{"problem.d_model", Json(o.d_model)};
    const auto d = size_t(o.d_model), v = size_t(vocab), t = size_t(o.context);
    const size_t f = blame.product(size_t(o.mlp_ratio), d);
    const size_t dd = blame.product(d, d), fd = blame.product(f, d);
    size_t block = blame.product(4, dd);
    for (const size_t part : {blame.product(2, fd), blame.product(9, d), f}) {
      block = blame.sum(block, part);
    }
    size_t total = blame.sum(blame.product(blame.product(2, v), d),
                             blame.sum(blame.product(t, d), blame.product(2, d)));
    // Blocks that each fit but not all together blame the layers.
    const ParamBlame deep{"problem.layers", Json(o.layers)};
    return deep.sum(total, deep.product(size_t(o.layers), block));
  }

  // The training windows (starts every `stride` tokens) and held-out windows
  // (at most eval_windows, non-overlapping) of the corpus; too short a text
  // for one window of context + 1 tokens is refused.
  static std::pair<size_t, size_t> windows(const TransformerOptions& o, const TextCorpus& c) {
    const auto T = static_cast<size_t>(o.context);
    const size_t train_len = c.train_tokens.size(), test_len = c.test_tokens.size();
    if (train_len < T + 1) {
      config_fail(
          "problem.context", o.context,
          "needs context + 1 tokens, but the training text has only " + std::to_string(train_len));
    }
    const size_t held_out = std::min(static_cast<size_t>(o.eval_windows), (test_len - 1) / T);
    if (held_out == 0) {
      config_fail("problem.context", o.context,
                  "needs context + 1 tokens, but the held-out text has only " +
                      std::to_string(test_len) + " (raise problem.test_fraction)");
    }
    return {(train_len - T - 1) / static_cast<size_t>(o.stride) + 1, held_out};
  }

  // Copies `count` windows of context + 1 tokens starting at start(i).
  template <class Start>
  void gather(const std::vector<int32_t>& tokens, size_t count, Start start,
              std::vector<int32_t>& out) const {
    const auto w = static_cast<size_t>(net_.shape().context + 1);
    out.resize(count * w);
    for (size_t i = 0; i < count; ++i) {
      std::copy_n(tokens.begin() + static_cast<std::ptrdiff_t>(start(i)), w, out.begin() + i * w);
    }
  }

  double mean_loss(std::span<const float> x, const std::vector<int32_t>& tokens,
                   const std::vector<size_t>& starts) const {
    const size_t chunks = (starts.size() + kEvalChunk - 1) / kEvalChunk;
    std::vector<double> sums(chunks, 0.0);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t c = 0; c < chunks; ++c) {
      const size_t first = c * kEvalChunk, count = std::min(kEvalChunk, starts.size() - first);
      TransformerWorkspace<float> ws;
      gather(
          tokens, count, [&](size_t i) { return starts[first + i]; }, ws.windows);
      sums[c] = net_.loss(x, ws.windows, count, {}, ws) * static_cast<double>(count);
    }
    double total = 0.0;
    for (const double s : sums) total += s;
    return total / static_cast<double>(starts.size());
  }

  TextCorpus corpus_;
  TransformerNet<float> net_;
  double init_std_;
  std::vector<size_t> train_starts_, test_starts_, subset_starts_;
};

}  // namespace

RegistryEntry<Problem> transformer_entry() {
  return make_registry_entry<Problem, Transformer, TransformerOptions>(
      "transformer",
      "tiny decoder-only transformer (GPT-2-shaped, pre-LN, untied head) as a character-level "
      "language model on Debian's fortune files");
}

}  // namespace bitlab
