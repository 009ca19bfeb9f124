// Helpers many test files share: bit-for-bit comparison and seeded random data.
// One definition here, not one per file (the test binary is a unity build, where
// two files' private copies of the same helper would collide).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "sim/core/rng.hpp"

namespace bitlab::testing {

// Same length and the same bits (so -0 != +0 and NaN payloads count).
inline bool bit_equal(std::span<const float> a, std::span<const float> b) {
  // Empty spans may hold null pointers, which memcmp must not get (UBSan).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// d draws of N(0, scale²) from the test stream `seed`.
inline std::vector<float> random_vector(size_t d, uint64_t seed, float scale) {
  std::vector<float> x(d);
  fill_normal(RngStream(seed, Purpose::kTest), x, scale);
  return x;
}

}  // namespace bitlab::testing
