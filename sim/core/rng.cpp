#include "sim/core/rng.hpp"

namespace bitlab {

void fill_normal(const RngStream& rng, std::span<float> out, float scale, uint64_t first_index) {
  // Element g = first_index + k uses block g/4: lanes (0,1) give the Box-Muller
  // pair for g%4 in {0,1}, lanes (2,3) for g%4 in {2,3}. So out[k] depends on g
  // only, whatever the split of the work.
  constexpr float kTwoPi = 6.28318530717958647692f;
  const uint64_t n = out.size();
  uint64_t k = 0;
  while (k < n) {
    const uint64_t g = first_index + k;
    const PhiloxBlock b = rng.block(g / 4);
    const float r0 = std::sqrt(-2.0f * std::log(u32_to_unit_open0(b[0])));
    const float t0 = kTwoPi * u32_to_unit_open0(b[1]);
    const float r1 = std::sqrt(-2.0f * std::log(u32_to_unit_open0(b[2])));
    const float t1 = kTwoPi * u32_to_unit_open0(b[3]);
    const float z[4] = {r0 * std::cos(t0), r0 * std::sin(t0), r1 * std::cos(t1), r1 * std::sin(t1)};
    for (uint64_t lane = g % 4; lane < 4 && k < n; ++lane, ++k) out[k] = scale * z[lane];
  }
}

}  // namespace bitlab
