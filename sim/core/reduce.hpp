// Deterministic reductions. Sums are formed over fixed blocks of kReduceBlock
// elements (in double), then the block sums are added in block order, so the
// result is the same for any thread count (docs/design.md: "Reductions sum in a
// fixed order").
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace bitlab {

inline constexpr size_t kReduceBlock = 4096;

double sum_squares(std::span<const float> x);
double dot(std::span<const float> a, std::span<const float> b);
inline double norm2(std::span<const float> x);
// Sum of squares of (a - b).
double distance_squared(std::span<const float> a, std::span<const float> b);
bool all_finite(std::span<const float> x);

}  // namespace bitlab

#include <cmath>
inline double bitlab::norm2(std::span<const float> x) {
  return std::sqrt(sum_squares(x));
}
