// What the real-data classifiers (softmax regression, deep MLP, CNN) share:
// the data split, softmax cross-entropy, and evaluation on held-out data.
//
// Eval columns: eval_loss and eval_accuracy on the held-out set (the whole
// test split, or its `test_samples` subsample), and train_loss_eval, the mean
// loss on the first `train_eval_samples` training samples: a fixed subsample
// (not the whole training set, to keep evaluation affordable on 60 000
// Fashion-MNIST images) that is the same for every run, so runs can be
// compared on it without batch noise.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "problems/datasets.hpp"
#include "problems/row_ops.hpp"
#include "sim/kernels/matmul.hpp"

namespace bitlab {

// One worker's rows of a batched pass (loss_grad_workers): rows
// [begin, begin + count) of the gathered samples, and its gradient.
struct WorkerRows {
  Eigen::Index begin = 0, count = 0;
  std::span<float> g;
};

// A layer's parameter gradients, worker by worker: the weight gradient dᵀ·input
// over the worker's rows into the row-major d.cols() × input.cols() block at
// g + weight_offset, and the bias gradient (Σ of d over its rows) at
// g + bias_offset. A sample is `per_sample` rows of d and input (1 for a dense
// layer; a convolution's output pixels for its im2col rows).
template <class Input>
void worker_layer_grads(std::span<const WorkerRows> workers, const RowMatrixF& d,
                        const Input& input, Eigen::Index per_sample, size_t weight_offset,
                        size_t bias_offset) {
  for (const WorkerRows& w : workers) {
    const Eigen::Index begin = w.begin * per_sample, count = w.count * per_sample;
    matmul_tn(d.middleRows(begin, count), input.middleRows(begin, count),
              Eigen::Map<RowMatrixF>(w.g.data() + weight_offset, d.cols(), input.cols()));
    sum_rows(d, begin, count, w.g.data() + bias_offset);
  }
}

// What every classifier's workspace holds: the gathered batch and its logits
// (then dloss/dlogits).
struct ClassifierWorkspace : Workspace {
  RowMatrixF rows;
  RowMatrixF logits;
  std::vector<WorkerRows> workers;
  std::vector<float> packed;  // a transposed weight matrix (matmul_nt)
};

class ClassifierProblem : public Problem {
 public:
  // loss_grad_workers for one worker.
  double loss_grad(std::span<const float> x, std::span<const uint32_t> batch, std::span<float> g,
                   const RngStream& noise, Workspace& ws) const final;

  // Gathers every worker's batch into one matrix, runs forward_logits over
  // all of it, the softmax cross-entropy per worker (each over its own batch
  // size) and backward; an empty batch has loss 0 and gradient 0.
  void loss_grad_workers(std::span<const float> x, std::span<WorkerBatch> workers,
                         Workspace& ws) const final;
  // 512 rows: the products' register tiles and weight panels are then reused
  // across many rows (bench_real: batch 4 × 32 workers went from 6.5 % to
  // 10.5 % of peak grouped, batch 32 × 16 from 28 % to 33 %).
  size_t pass_samples() const override { return 512; }

  size_t num_train() const override { return data_.train.count(); }
  size_t held_train_samples() const override { return data_.train.held(); }
  std::span<const int32_t> train_labels() const override { return data_.train.labels; }
  int num_classes() const override { return data_.classes; }

  std::vector<std::string> eval_columns() const override {
    return {"eval_loss", "eval_accuracy", "train_loss_eval"};
  }
  void evaluate(std::span<const float> x, std::span<double> out) const override;

  const DatasetSplit& data() const { return data_; }

 protected:
  // Under a restricting scope the training rows held are sorted by sample and
  // include the first train_eval_samples when it evaluates, so those are rows
  // 0..k−1 of data_.train.x as in the simulator.
  ClassifierProblem(const DatasetOptions& o, const DataScope& scope);

  // Writes the logits (rows.rows() × classes) of the samples in `rows` at
  // parameters x into `logits`, using `ws` for temporaries (thread-safe for
  // distinct workspaces). Each sample's logits must not depend on the other
  // rows (sim/kernels/matmul.hpp's products, elementwise activations): that is
  // what lets one call serve several workers.
  virtual void forward_logits(std::span<const float> x, const RowMatrixF& rows, Workspace& ws,
                              RowMatrixF& logits) const = 0;

  // Writes each worker's gradient into its g from ws (a ClassifierWorkspace
  // whose `logits` now hold dloss/dlogits, with the forward pass's
  // temporaries intact): weight and bias gradients over the worker's own rows,
  // input gradients over all rows at once.
  virtual void backward(std::span<const float> x, std::span<const WorkerRows> workers,
                        Workspace& ws) const = 0;

  DatasetSplit data_;
  size_t train_eval_samples_;

 private:
  // Copies the batch's training rows into rows [begin, begin + batch.size()).
  void gather(std::span<const uint32_t> batch, Eigen::Index begin, RowMatrixF& rows) const;

  // Mean softmax cross-entropy of the batch, whose logits are rows [begin,
  // begin + batch.size()); turns them in place into dloss/dlogits =
  // (softmax − onehot) / n. Log-sum-exp in double, shifted by the row maximum
  // so exp() cannot overflow.
  double softmax_xent_backward(std::span<const uint32_t> batch, Eigen::Index begin,
                               RowMatrixF& logits) const;
};

// log Σ_c exp(logit_c) of one row, in double, shifted by the maximum.
double log_sum_exp_row(const float* logits, Eigen::Index classes);

// LeCun-style N(0, gain/fan_in) weights drawn in order from `rng` into x.
void fill_fan_in_normal(std::span<float> x, size_t fan_in, double gain, RngStream& rng);

}  // namespace bitlab
