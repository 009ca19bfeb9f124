#include "problems/classifier.hpp"

#include <algorithm>
#include <cmath>

#include "sim/kernels/det_math.hpp"
#include "sim/core/rng.hpp"

namespace bitlab {

ClassifierProblem::ClassifierProblem(const DatasetOptions& o, const DataScope& scope)
    : data_(load_dataset(o, scope)),
      train_eval_samples_(
          o.train_eval_samples > 0
              ? std::min(static_cast<size_t>(o.train_eval_samples), data_.train.count())
              : data_.train.count()) {}

double log_sum_exp_row(const float* logits, Eigen::Index classes) {
  double m = logits[0];
  for (Eigen::Index c = 1; c < classes; ++c) m = std::max(m, double(logits[c]));
  double s = 0.0;
  for (Eigen::Index c = 0; c < classes; ++c) s += det_math::exp(double(logits[c]) - m);
  return m + det_math::log(s);
}

void fill_fan_in_normal(std::span<float> x, size_t fan_in, double gain, RngStream& rng) {
  const double scale = std::sqrt(gain / static_cast<double>(fan_in));
  for (float& v : x) v = static_cast<float>(scale * rng.next_normal());
}

double ClassifierProblem::loss_grad(std::span<const float> x, std::span<const uint32_t> batch,
                                    std::span<float> g, const RngStream& noise,
                                    Workspace& ws) const {
  WorkerBatch one{batch, g, &noise};
  loss_grad_workers(x, {&one, 1}, ws);
  return one.loss;
}

void ClassifierProblem::loss_grad_workers(std::span<const float> x,
                                          std::span<WorkerBatch> workers, Workspace& ws) const {
  auto& cws = static_cast<ClassifierWorkspace&>(ws);
  cws.workers.clear();
  Eigen::Index total = 0;
  for (WorkerBatch& w : workers) {
    w.loss = 0.0;
    if (w.batch.empty()) {
      std::fill(w.g.begin(), w.g.end(), 0.0f);
      continue;
    }
    cws.workers.push_back({total, static_cast<Eigen::Index>(w.batch.size()), w.g});
    total += static_cast<Eigen::Index>(w.batch.size());
  }
  if (total == 0) return;
  cws.rows.resize(total, data_.train.x.cols());
  size_t k = 0;
  for (const WorkerBatch& w : workers) {
    if (!w.batch.empty()) gather(w.batch, cws.workers[k++].begin, cws.rows);
  }
  forward_logits(x, cws.rows, ws, cws.logits);
  k = 0;
  for (WorkerBatch& w : workers) {
    if (!w.batch.empty()) w.loss = softmax_xent_backward(w.batch, cws.workers[k++].begin, cws.logits);
  }
  backward(x, cws.workers, ws);
}

// A batch's samples are random rows of the training set (188 MB for
// Fashion-MNIST: most come from memory), so the row two ahead is prefetched
// while one is copied.
void ClassifierProblem::gather(std::span<const uint32_t> batch, Eigen::Index begin,
                               RowMatrixF& rows) const {
  constexpr size_t kAhead = 2, kLine = 64;
  const size_t bytes = static_cast<size_t>(data_.train.x.cols()) * sizeof(float);
  const auto prefetch = [&](size_t r) {
    if (r >= batch.size()) return;
    const auto* p = reinterpret_cast<const char*>(data_.train.row(batch[r]).data());
    for (size_t b = 0; b < bytes; b += kLine) __builtin_prefetch(p + b);
  };
  for (size_t r = 0; r < kAhead; ++r) prefetch(r);
  for (size_t r = 0; r < batch.size(); ++r) {
    prefetch(r + kAhead);
    rows.row(begin + static_cast<Eigen::Index>(r)) = data_.train.row(batch[r]);
  }
}

double ClassifierProblem::softmax_xent_backward(std::span<const uint32_t> batch,
                                                Eigen::Index begin, RowMatrixF& logits) const {
  const Eigen::Index classes = logits.cols();
  const double inv_n = 1.0 / static_cast<double>(batch.size());
  double loss = 0.0;
  for (size_t r = 0; r < batch.size(); ++r) {
    const int32_t y = data_.train.labels[batch[r]];
    float* row = logits.row(begin + static_cast<Eigen::Index>(r)).data();
    const double lse = log_sum_exp_row(row, classes);
    loss += lse - row[y];
    for (Eigen::Index c = 0; c < classes; ++c) {
      const double p = det_math::exp(double(row[c]) - lse);
      row[c] = static_cast<float>((p - (c == y ? 1.0 : 0.0)) * inv_n);
    }
  }
  return loss * inv_n;
}

void ClassifierProblem::evaluate(std::span<const float> x, std::span<double> out) const {
  // Fixed chunks of rows evaluated in parallel, each into its own slot, then
  // summed in chunk order: the result does not depend on the thread count.
  constexpr Eigen::Index kChunk = 256;
  const auto mean_loss = [&](const Samples& set, Eigen::Index count, double* accuracy) {
    const Eigen::Index chunks = (count + kChunk - 1) / kChunk;
    std::vector<double> loss(static_cast<size_t>(chunks), 0.0);
    std::vector<int64_t> correct(static_cast<size_t>(chunks), 0);
#pragma omp parallel
    {
      auto ws = make_workspace();
      RowMatrixF rows, logits;
#pragma omp for schedule(dynamic, 1)
      for (Eigen::Index k = 0; k < chunks; ++k) {
        const Eigen::Index begin = k * kChunk, size = std::min(kChunk, count - begin);
        rows = set.x.middleRows(begin, size);
        forward_logits(x, rows, *ws, logits);
        for (Eigen::Index r = 0; r < size; ++r) {
          const int32_t y = set.labels[static_cast<size_t>(begin + r)];
          loss[size_t(k)] += log_sum_exp_row(logits.row(r).data(), logits.cols()) - logits(r, y);
          Eigen::Index best = 0;
          logits.row(r).maxCoeff(&best);
          correct[size_t(k)] += best == y;
        }
      }
    }
    double total = 0.0;
    int64_t hits = 0;
    for (size_t k = 0; k < loss.size(); ++k) {
      total += loss[k];
      hits += correct[k];
    }
    if (accuracy) *accuracy = static_cast<double>(hits) / static_cast<double>(count);
    return total / static_cast<double>(count);
  };
  out[0] = mean_loss(data_.test, static_cast<Eigen::Index>(data_.test.count()), &out[1]);
  out[2] = mean_loss(data_.train, static_cast<Eigen::Index>(train_eval_samples_), nullptr);
}

}  // namespace bitlab
