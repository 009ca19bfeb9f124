// transformer: a tiny decoder-only (GPT-2-shaped) character-level language
// model on a plain-text corpus (problems/text_corpus.hpp). The problem class
// stays private to transformer.cpp; this header exposes the network itself,
// templated on the scalar type, so that tests can check the hand-written
// backward pass in double against finite differences and the benchmark can
// time it.
//
// Architecture (Radford et al. 2019, GPT-2, at toy size):
//   h_0 = tok_emb[token] + pos_emb[position]
//   per block l (pre-LN):  h += proj(causal_multihead_attention(LN1(h)))
//                          h += mlp_proj(GELU(mlp_fc(LN2(h))))
//   logits = head(LN_f(h))   (untied: head.weight is its own tensor, no bias)
//   loss   = mean over every predicted token of −log softmax(logits)[next token]
// GELU is GPT-2's tanh approximation. Departures from GPT-2, all for size
// and determinism: characters (bytes) instead of BPE tokens; an untied output
// projection (GPT-2 ties it to tok_emb), without bias as in GPT-2; no dropout;
// layer-norm statistics in the model's scalar type (float in runs).
#pragma once

#include <Eigen/Dense>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "problems/problem.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct TransformerShape {
  int64_t vocab = 0;
  int64_t context = 64;  // tokens per window (predictions per window)
  int64_t d_model = 96;
  int64_t layers = 3;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;  // MLP hidden width = mlp_ratio · d_model
  // Planted-bug switch for the tests only (not an option): false lets every
  // position attend to the future.
  bool causal = true;
};

// Every weight, bias and layer-norm gain/bias is its own tensor (1-bit LAMB
// takes one trust ratio per tensor): tok_emb.weight, pos_emb.weight, then per
// block h<l>.{ln1.gain, ln1.bias, attn.qkv.weight, attn.qkv.bias,
// attn.proj.weight, attn.proj.bias, ln2.gain, ln2.bias, mlp.fc.weight,
// mlp.fc.bias, mlp.proj.weight, mlp.proj.bias}, then ln_f.gain, ln_f.bias,
// head.weight. Weights are row-major (out × in): y = x·Wᵀ + b.
std::vector<TensorInfo> transformer_tensors(const TransformerShape& s);

// FLOPs of the matrix products of one forward + backward pass over `windows`
// windows (2 per multiply-add; the causal attention products counted over the
// full T × T squares that are computed). The benchmark's "% of peak" uses it.
double transformer_matmul_flops(const TransformerShape& s, int64_t windows);

template <class S>
class TransformerNet {
 public:
  using Matrix = Eigen::Matrix<S, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

  explicit TransformerNet(const TransformerShape& shape);

  const TransformerShape& shape() const { return shape_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  size_t dim() const { return tensors_.back().offset + tensors_.back().size; }

  // GPT-2 initialisation from RngStream(seed, Purpose::kInit), tensor by
  // tensor in order: weights and embeddings N(0, init_std²), the two residual
  // projections of each block (attn.proj, mlp.proj) N(0, init_std²/(2·layers)),
  // biases 0, layer-norm gains 1.
  void init(std::span<S> x, uint64_t seed, double init_std) const;

  std::unique_ptr<Workspace> make_workspace() const;

  // Mean next-token loss over `count` windows of context + 1 tokens each
  // (row after row in `windows`: inputs are tokens 0..T−1, targets 1..T).
  // With a non-empty `g`, writes the gradient of that mean (overwritten).
  // Thread-safe for distinct workspaces. After the call the workspace holds
  // the logits (count·T × vocab), see logits().
  double loss(std::span<const S> x, std::span<const int32_t> windows, size_t count, std::span<S> g,
              Workspace& ws) const;

  // One worker's part of loss_groups: its `count` windows (the next ones in
  // `windows`), its gradient (empty in every group: no backward pass) and its
  // mean loss (written).
  struct Group {
    size_t count = 0;
    std::span<S> g;
    double loss = 0.0;
  };
  // loss() for several workers at once: every product runs over all their
  // windows, the weight gradients over each group's rows. Each group's loss
  // and gradient are bit for bit what loss() gives it alone (for float: the
  // products are sim/kernels/matmul.hpp's and every row reduction has a fixed
  // order, so nothing depends on where a window sits in the batch).
  void loss_groups(std::span<const S> x, std::span<const int32_t> windows, std::span<Group> groups,
                   Workspace& ws) const;

  // The logits of the last loss() call on `ws`.
  static const Matrix& logits(const Workspace& ws);

 private:
  TransformerShape shape_;
  std::vector<TensorInfo> tensors_;
};

extern template class TransformerNet<float>;
extern template class TransformerNet<double>;

struct TransformerOptions {
  std::vector<std::string> files;  // default: default_fortune_files()
  double test_fraction = 0.1;
  int64_t context = 64;
  int64_t stride = 32;
  int64_t d_model = 96;
  int64_t layers = 3;
  int64_t heads = 4;
  int64_t mlp_ratio = 4;
  double init_std = 0.02;
  int64_t eval_windows = 128;
  uint64_t data_seed = 0;
  TransformerOptions();
  static Schema<TransformerOptions> schema();
};

RegistryEntry<Problem> transformer_entry();

}  // namespace bitlab
