// Which training samples a process holds (DataScope, problems/problem.hpp) and
// the Samples bookkeeping that follows from it.
#include <algorithm>
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
    const size_t prefix = std::min(eval_prefix, num_train);
    std::vector<uint32_t> merged;
    merged.reserve(keep.size() + prefix);
    size_t k = 0;
    for (uint32_t j = 0; j < prefix; ++j) {
      while (k < keep.size() && keep[k] < j) merged.push_back(keep[k++]);
      if (k < keep.size() && keep[k] == j) ++k;
      merged.push_back(j);
    }
    merged.insert(merged.end(), keep.begin() + static_cast<std::ptrdiff_t>(k), keep.end());
    keep = std::move(merged);
  }
  if (keep.size() == num_train) return std::nullopt;
  return keep;
}

Eigen::Index Samples::row_index(uint32_t sample) const {
  if (row_of.empty()) return static_cast<Eigen::Index>(sample);
  const int32_t r = sample < row_of.size() ? row_of[sample] : -1;
  if (r < 0) {
    // A worker draws only from its shard, which its process holds: reaching
    // here is a bug in the DataScope, not bad input.
    throw std::logic_error("internal: training sample " + std::to_string(sample) +
                           " is not held by this process");
  }
  return r;
}

void Samples::hold_only(const std::optional<std::vector<uint32_t>>& keep) {
  if (!keep) return;
  const size_t total = count();
  RowMatrixF kept(static_cast<Eigen::Index>(keep->size()), x.cols());
  std::vector<int32_t> map(total, -1);
  for (size_t r = 0; r < keep->size(); ++r) {
    const uint32_t j = (*keep)[r];
    kept.row(static_cast<Eigen::Index>(r)) = row(j);
    map[j] = static_cast<int32_t>(r);
  }
  x = std::move(kept);
  row_of = std::move(map);
}

void draw_samples(
    Samples& s, Eigen::Index count, Eigen::Index features, RngStream& rng,
    const std::function<std::optional<std::vector<uint32_t>>(const Samples&, size_t count)>& held,
    const std::function<void(RngStream&, float* row, Eigen::Index j)>& draw) {
  s.row_of.clear();
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
  if (!keep) {
    s.x.resize(count, features);
    for (Eigen::Index j = 0; j < count; ++j) draw(rng, s.x.row(j).data(), j);
    return;
  }
  s.x.resize(static_cast<Eigen::Index>(keep->size()), features);
  s.row_of.assign(static_cast<size_t>(count), -1);
  for (size_t r = 0; r < keep->size(); ++r) s.row_of[(*keep)[r]] = static_cast<int32_t>(r);
  for (Eigen::Index j = 0; j < count; ++j) {
    const int32_t r = s.row_of[static_cast<size_t>(j)];
    draw(rng, r >= 0 ? s.x.row(r).data() : scratch.data(), j);
  }
}

}  // namespace bitlab
