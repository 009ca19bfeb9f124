// Which training samples a process holds (DataScope, problems/problem.hpp) and
// the Samples bookkeeping that follows from it.
#include <algorithm>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>

#include "problems/problem.hpp"
#include "problems/synthetic.hpp"

namespace bitlab {

std::optional<std::vector<uint32_t>> held_samples(const DataScope& scope, size_t num_train,
                                                  std::span<const int32_t> labels, int classes,
                                                  size_t eval_prefix) {
  if (scope.holds_all()) return std::nullopt;
  std::vector<uint32_t> keep = scope.worker_samples(num_train, labels, classes);
  if (scope.evaluates && eval_prefix > 0) {
    std::vector<uint32_t> prefix(std::min(eval_prefix, num_train));
    std::iota(prefix.begin(), prefix.end(), 0u);
    std::vector<uint32_t> merged;
    std::set_union(keep.begin(), keep.end(), prefix.begin(), prefix.end(),
                   std::back_inserter(merged));
    keep = std::move(merged);
  }
  if (keep.size() == num_train) return std::nullopt;
  return keep;
}

Eigen::Index Samples::row_index(uint32_t sample) const {
  const int32_t r = row_of.empty() || sample < row_of.size() ? held_row(sample) : -1;
  if (r < 0) {
    // A worker draws only from its shard, which its process holds: reaching
    // here is a bug in the DataScope, not bad input.
    throw std::logic_error("internal: training sample " + std::to_string(sample) +
                           " is not held by this process");
  }
  return r;
}

void Samples::allocate_rows(size_t count, Eigen::Index features,
                            const std::optional<std::vector<uint32_t>>& keep) {
  row_of.clear();
  x.resize(static_cast<Eigen::Index>(keep ? keep->size() : count), features);
  if (!keep) return;
  row_of.assign(count, -1);
  for (size_t r = 0; r < keep->size(); ++r) row_of[(*keep)[r]] = static_cast<int32_t>(r);
}

void Samples::hold_only(const std::optional<std::vector<uint32_t>>& keep) {
  if (!keep) return;
  const RowMatrixF all = std::move(x);  // every sample's row (row j = sample j)
  allocate_rows(static_cast<size_t>(all.rows()), all.cols(), keep);
  for (size_t r = 0; r < keep->size(); ++r) {
    x.row(static_cast<Eigen::Index>(r)) = all.row((*keep)[r]);
  }
}

void draw_samples(
    Samples& s, Eigen::Index count, Eigen::Index features, RngStream& rng,
    const std::function<std::optional<std::vector<uint32_t>>(const Samples&, size_t count)>& held,
    const std::function<void(RngStream&, float* row, Eigen::Index j)>& draw) {
  // Sharding may need the labels: a first pass draws every sample into a
  // scratch row and keeps only labels/targets, a second keeps the features.
  // Without `held` (every sample held) one pass does.
  RowMatrixF scratch(1, features);
  std::optional<std::vector<uint32_t>> keep;
  if (held) {
    const RngStream start = rng;
    for (Eigen::Index j = 0; j < count; ++j) draw(rng, scratch.data(), j);
    keep = held(s, static_cast<size_t>(count));
    rng = start;
  }
  s.allocate_rows(static_cast<size_t>(count), features, keep);
  for (Eigen::Index j = 0; j < count; ++j) {
    const int32_t r = s.held_row(static_cast<uint32_t>(j));
    draw(rng, r >= 0 ? s.x.row(r).data() : scratch.data(), j);
  }
}

}  // namespace bitlab
