#include "sim/collectives/powersgd.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "sim/core/rng.hpp"
#include "sim/kernels/low_rank.hpp"

namespace bitlab {

namespace {

constexpr uint64_t kMiB = 1024 * 1024;
// DDP's _DEFAULT_FIRST_BUCKET_BYTES (torch/distributed/__init__.py, 1.13).
constexpr uint64_t kFirstBucketBytes = kMiB;

// A tensor as the hook views it: view(shape[0], -1); a 1-D tensor is size × 1.
std::pair<size_t, size_t> matrix_view(const TensorInfo& t) {
  const size_t rows = t.one_dimensional() ? t.size : t.rows;
  return {rows, rows == 0 ? 0 : t.size / rows};
}

// The hook's _should_compress: (rows + cols)·r·min_compression_rate < rows·cols.
bool worth_compressing(size_t rows, size_t cols, size_t rank, double rate) {
  return static_cast<double>((rows + cols) * rank) * rate < static_cast<double>(rows * cols);
}

PowerSgdBucket make_bucket(const std::vector<int>& members, const std::vector<TensorInfo>& tensors,
                           const PowerSgdOptions& o) {
  PowerSgdBucket b;
  b.tensors = members;
  // shape_to_tensors: groups keyed by the matrix view, in order of first appearance.
  std::vector<std::pair<std::pair<size_t, size_t>, std::vector<int>>> groups;
  for (const int t : members) {
    const TensorInfo& info = tensors[static_cast<size_t>(t)];
    b.elements += info.size;
    const auto [rows, cols] = matrix_view(info);
    const size_t rank = std::min({rows, cols, static_cast<size_t>(o.matrix_approximation_rank)});
    if (rows == 0 || !worth_compressing(rows, cols, rank, o.min_compression_rate)) {
      b.uncompressed.push_back(t);
      b.uncompressed_elements += info.size;
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(),
                          [&](const auto& e) { return e.first == std::make_pair(rows, cols); });
    if (g == groups.end()) {
      groups.push_back({{rows, cols}, {}});
      g = groups.end() - 1;
    }
    g->second.push_back(t);
  }
  for (const auto& [shape, members_of_shape] : groups) {
    const auto [rows, cols] = shape;
    const size_t rank = std::min({rows, cols, static_cast<size_t>(o.matrix_approximation_rank)});
    for (const int t : members_of_shape) {
      b.compressed.push_back({t, tensors[static_cast<size_t>(t)].offset, rows, cols, rank,
                              b.p_size, b.q_size});
      b.p_size += rows * rank;
      b.q_size += cols * rank;
      if (!o.batch_tensors_with_same_shape) b.draw_shapes.push_back({1, cols, rank});
    }
    if (o.batch_tensors_with_same_shape) b.draw_shapes.push_back({members_of_shape.size(), cols, rank});
  }
  return b;
}

std::vector<TensorInfo> tensors_or_whole(std::vector<TensorInfo> tensors, size_t dim) {
  if (tensors.empty()) tensors.push_back({"x", 0, dim});
  return tensors;
}

}  // namespace

std::vector<std::vector<int>> ddp_bucket_assignment(const std::vector<uint64_t>& bytes,
                                                    const std::vector<int>& order,
                                                    const std::vector<uint64_t>& limits) {
  std::vector<std::vector<int>> out;
  std::vector<int> current;
  uint64_t size = 0;
  size_t limit = 0;
  for (const int t : order) {
    current.push_back(t);
    size += bytes[static_cast<size_t>(t)];
    if (size >= limits[limit]) {
      out.push_back(std::move(current));
      current.clear();
      size = 0;
      if (limit + 1 < limits.size()) ++limit;
    }
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

PowerSgdExchange::PowerSgdExchange(const PowerSgdOptions& opts, int workers, size_t dim,
                                   std::vector<TensorInfo> tensors)
    : opts_(opts), workers_(workers), dim_(dim), tensors_(tensors_or_whole(std::move(tensors), dim)) {
  for (int t = static_cast<int>(tensors_.size()) - 1; t >= 0; --t) ready_order_.push_back(t);
  plan_buckets();
}

void PowerSgdExchange::set_ready_order(std::vector<int> order) {
  // The same order again (a resumed run records it anew): keep the state.
  if (order == ready_order_) return;
  std::vector<int> seen(tensors_.size(), 0);
  for (const int t : order) {
    if (t < 0 || static_cast<size_t>(t) >= tensors_.size() || seen[static_cast<size_t>(t)]++) {
      throw std::invalid_argument("PowerSGD ready order: tensor index " + std::to_string(t) +
                                  " out of range or repeated");
    }
  }
  if (order.size() != tensors_.size()) {
    throw std::invalid_argument("PowerSGD ready order: " + std::to_string(order.size()) +
                                " tensors, the model has " + std::to_string(tensors_.size()));
  }
  ready_order_ = std::move(order);
  plan_buckets();
  q_memory_.assign(rebuilt_.size(), {});
  has_memory_.assign(rebuilt_.size(), 0);
  if (resident_ > 0) setup(first_worker_, resident_);
}

void PowerSgdExchange::plan_buckets() {
  std::vector<int> model_order(tensors_.size());
  std::vector<uint64_t> bytes(tensors_.size());
  for (size_t t = 0; t < tensors_.size(); ++t) {
    model_order[t] = static_cast<int>(t);
    bytes[t] = 4 * static_cast<uint64_t>(tensors_[t].size);
  }
  first_ = {make_bucket(model_order, tensors_, opts_)};
  rebuilt_.clear();
  const auto cap = static_cast<uint64_t>(opts_.bucket_cap_mb * static_cast<double>(kMiB));
  for (const auto& members : ddp_bucket_assignment(bytes, ready_order_, {kFirstBucketBytes, cap})) {
    rebuilt_.push_back(make_bucket(members, tensors_, opts_));
  }
}

void PowerSgdExchange::setup(int first, int resident) {
  first_worker_ = first;
  resident_ = resident;
  size_t most = 0;
  for (const auto* list : {&first_, &rebuilt_}) {
    for (const PowerSgdBucket& b : *list) most = std::max({most, b.p_size, b.q_size});
  }
  const size_t rows = static_cast<size_t>(resident);
  error_.assign(opts_.use_error_feedback ? rows * dim_ : 0, 0.0f);
  rows_.assign(rows * most, 0.0f);
  p_.assign(most, 0.0f);
  q_.assign(most, 0.0f);
  mean_.assign(dim_, 0.0f);
  q_memory_.resize(rebuilt_.size());
  has_memory_.resize(rebuilt_.size(), 0);
  for (size_t b = 0; b < rebuilt_.size(); ++b) {
    q_memory_[b].assign(opts_.warm_start ? rebuilt_[b].q_size : 0, 0.0f);
  }
}

void PowerSgdExchange::exchange(Communicator& comm, const WorkerBuffers& grads, int64_t step,
                                std::span<float> out) {
  const int64_t iter = step - 1;  // the hook's state.iter
  const std::vector<PowerSgdBucket>& buckets = iter == 0 ? first_ : rebuilt_;
  if (iter < opts_.start_powerSGD_iter) {
    // default._allreduce_fut per bucket: the plain mean.
    comm.exact_mean(grads, out, WireDtype::kFp32);
    for (const PowerSgdBucket& b : buckets) {
      comm.record(allreduce_record(comm.workers(), static_cast<int64_t>(b.elements),
                                   WireDtype::kFp32, "ring"));
    }
    return;
  }
  compressed_step(comm, grads, buckets, iter > 0, out);
}

void PowerSgdExchange::compressed_step(Communicator& comm, const WorkerBuffers& grads,
                                       const std::vector<PowerSgdBucket>& buckets,
                                       bool rebuilt, std::span<float> out) {
  // M_w = g_w + e_w (the error kept in place becomes this step's M).
  WorkerBuffers m = grads;
  if (opts_.use_error_feedback) {
    for (int w = 0; w < resident_; ++w) {
      const std::span<const float> g = grads[first_worker_ + w];
      float* e = error_.data() + static_cast<size_t>(w) * dim_;
      for (size_t k = 0; k < dim_; ++k) e[k] += g[k];
    }
    m = {error_.data(), dim_, dim_, workers_, first_worker_, resident_};
  }
  // The uncompressed tensors' mean (allreduce 1 of every bucket).
  comm.exact_mean(m, std::span<float>(mean_.data(), dim_), WireDtype::kFp32);
  for (const PowerSgdBucket& b : buckets) {
    for (const int t : b.uncompressed) {
      const TensorInfo& info = tensors_[static_cast<size_t>(t)];
      std::copy_n(mean_.begin() + static_cast<std::ptrdiff_t>(info.offset), info.size,
                  out.begin() + static_cast<std::ptrdiff_t>(info.offset));
    }
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].uncompressed_elements > 0) {
      // An allreduce of an empty tensor (a bucket with nothing uncompressed)
      // is not logged: it moves nothing.
      comm.record(allreduce_record(comm.workers(),
                                   static_cast<int64_t>(buckets[b].uncompressed_elements),
                                   WireDtype::kFp32, "ring"));
    }
    if (!buckets[b].compressed.empty()) {
      settle_bucket(comm, static_cast<int>(b), buckets[b], rebuilt, m, out);
    }
  }
  // e_w = M_w − result, over every tensor (the hook's input_tensor_cp − input_tensor).
  if (opts_.use_error_feedback) {
    for (int w = 0; w < resident_; ++w) {
      float* e = error_.data() + static_cast<size_t>(w) * dim_;
      for (size_t k = 0; k < dim_; ++k) e[k] -= out[k];
    }
  }
}

void PowerSgdExchange::start_q(const PowerSgdBucket& bucket, std::span<float> q) {
  if (random_start_) {
    random_start_(draws_, bucket, q);
  } else {
    fill_normal(RngStream(static_cast<uint64_t>(opts_.random_seed), Purpose::kLowRank, 0,
                          static_cast<uint64_t>(draws_)),
                q, 1.0f);
  }
  ++draws_;
}

void PowerSgdExchange::settle_bucket(Communicator& comm, int b, const PowerSgdBucket& bucket,
                                     bool rebuilt, const WorkerBuffers& m, std::span<float> out) {
  // torch.linalg.qr (rank > 2) takes no epsilon; Gram-Schmidt (rank <= 2) does.
  const auto eps_for = [&](const LowRankMatrix& x) {
    return x.rank <= 2 ? opts_.orthogonalization_epsilon : 0.0;
  };
  const std::span<float> p(p_.data(), bucket.p_size), q(q_.data(), bucket.q_size);
  const size_t slot = static_cast<size_t>(b);
  // Q: the last step's (warm start) or a random start; orthogonalized.
  if (rebuilt && opts_.warm_start && has_memory_[slot]) {
    std::copy(q_memory_[slot].begin(), q_memory_[slot].end(), q.begin());
  } else {
    start_q(bucket, q);
  }
  for (const LowRankMatrix& x : bucket.compressed) {
    orthogonalize_columns(q.data() + x.q_offset, x.cols, x.rank, eps_for(x));
  }
  // P = Σ_w M_w·Q (allreduce 2), orthogonalized.
  const WorkerBuffers p_rows{rows_.data(), bucket.p_size, bucket.p_size, workers_, first_worker_,
                             resident_};
#pragma omp parallel for schedule(static)
  for (int w = first_worker_; w < first_worker_ + resident_; ++w) {
    for (const LowRankMatrix& x : bucket.compressed) {
      low_rank_project(m[w].data() + x.offset, x.rows, x.cols, q.data() + x.q_offset, x.rank,
                       p_rows[w].data() + x.p_offset);
    }
  }
  comm.exact_mean(p_rows, p, WireDtype::kFp32);
  const float n = static_cast<float>(workers_);
  for (float& v : p) v *= n;  // the sum: the hook does not divide P
  comm.record(allreduce_record(comm.workers(), static_cast<int64_t>(bucket.p_size),
                               WireDtype::kFp32, "ring"));
  for (const LowRankMatrix& x : bucket.compressed) {
    orthogonalize_columns(p.data() + x.p_offset, x.rows, x.rank, eps_for(x));
  }
  // Q = mean_w M_wᵀ·P (allreduce 3).
  const WorkerBuffers q_rows{rows_.data(), bucket.q_size, bucket.q_size, workers_, first_worker_,
                             resident_};
#pragma omp parallel for schedule(static)
  for (int w = first_worker_; w < first_worker_ + resident_; ++w) {
    for (const LowRankMatrix& x : bucket.compressed) {
      low_rank_project_back(m[w].data() + x.offset, x.rows, x.cols, p.data() + x.p_offset,
                            x.rank, q_rows[w].data() + x.q_offset);
    }
  }
  comm.exact_mean(q_rows, q, WireDtype::kFp32);
  comm.record(allreduce_record(comm.workers(), static_cast<int64_t>(bucket.q_size),
                               WireDtype::kFp32, "ring"));
  // Every worker's tensor = P·Qᵀ.
  for (const LowRankMatrix& x : bucket.compressed) {
    low_rank_expand(p.data() + x.p_offset, q.data() + x.q_offset, x.rows, x.cols, x.rank,
                    out.data() + x.offset);
  }
  if (rebuilt && opts_.warm_start) {
    std::copy(q.begin(), q.end(), q_memory_[slot].begin());
    has_memory_[slot] = 1;
  }
}

std::vector<CommRecord> PowerSgdExchange::vanilla_records(bool first_step) const {
  std::vector<CommRecord> out;
  for (const PowerSgdBucket& b : first_step ? first_ : rebuilt_) {
    out.push_back(allreduce_record(workers_, static_cast<int64_t>(b.elements), WireDtype::kFp32,
                                   "ring"));
  }
  return out;
}

std::vector<CommRecord> PowerSgdExchange::compressed_records() const {
  std::vector<CommRecord> out;
  for (const PowerSgdBucket& b : rebuilt_) {
    if (b.uncompressed_elements > 0) {
      out.push_back(allreduce_record(workers_, static_cast<int64_t>(b.uncompressed_elements),
                                     WireDtype::kFp32, "ring"));
    }
    if (b.compressed.empty()) continue;
    out.push_back(allreduce_record(workers_, static_cast<int64_t>(b.p_size), WireDtype::kFp32,
                                   "ring"));
    out.push_back(allreduce_record(workers_, static_cast<int64_t>(b.q_size), WireDtype::kFp32,
                                   "ring"));
  }
  return out;
}

uint64_t PowerSgdExchange::planned_bytes(const PowerSgdOptions& opts, int resident, size_t dim,
                                         const std::vector<TensorInfo>& tensors, int workers) {
  PowerSgdExchange x(opts, workers, dim, tensors);
  size_t most = 0, memory = 0;
  for (const auto* list : {&x.first_, &x.rebuilt_}) {
    for (const PowerSgdBucket& b : *list) most = std::max({most, b.p_size, b.q_size});
  }
  if (opts.warm_start) {
    for (const PowerSgdBucket& b : x.rebuilt_) memory += b.q_size;
  }
  const uint64_t r = static_cast<uint64_t>(resident);
  const uint64_t floats = (opts.use_error_feedback ? r * dim : 0) + r * most + 2 * most + dim +
                          memory;
  return 4 * floats;
}

size_t PowerSgdExchange::held_worker_bytes() const {
  return 4 * (error_.size() + rows_.size());
}

void PowerSgdExchange::serialize(StateArchive& io) {
  io.field("powersgd.error", error_);
  io.field("powersgd.draws", draws_);
  for (size_t b = 0; b < q_memory_.size(); ++b) {
    io.field("powersgd.q." + std::to_string(b), q_memory_[b]);
    io.field("powersgd.has_q." + std::to_string(b), has_memory_[b]);
  }
}

}  // namespace bitlab
