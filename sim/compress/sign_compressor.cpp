#include <cmath>
#include <cstring>

#include "sim/compress/compressor.hpp"
#include "sim/kernels/reduce.hpp"

namespace bitlab {

void pack_signs(std::span<const float> x, std::span<uint8_t> bits) {
  const size_t n = x.size();
  const size_t full = n / 8;
  const float* p = x.data();
  for (size_t j = 0; j < full; ++j, p += 8) {
    // MSB first: element 8j is bit 7. (x >= 0) makes sign(0) = +1, as the
    // reference packs it.
    bits[j] = static_cast<uint8_t>((p[0] >= 0.0f) << 7 | (p[1] >= 0.0f) << 6 | (p[2] >= 0.0f) << 5 |
                                   (p[3] >= 0.0f) << 4 | (p[4] >= 0.0f) << 3 | (p[5] >= 0.0f) << 2 |
                                   (p[6] >= 0.0f) << 1 | (p[7] >= 0.0f));
  }
  if (n % 8) {
    uint8_t b = 0;
    for (size_t k = 0; k < n % 8; ++k) b |= static_cast<uint8_t>((p[k] >= 0.0f) << (7 - k));
    bits[full] = b;
  }
}

void unpack_signs(std::span<const uint8_t> bits, float scale, std::span<float> out) {
  const size_t n = out.size();
  for (size_t k = 0; k < n; ++k) {
    out[k] = (bits[k / 8] >> (7 - k % 8)) & 1u ? scale : -scale;
  }
}

float SignCompressor::scale_of(std::span<const float> x) const {
  if (x.empty()) return 0.0f;
  if (scale_ == SignScale::kRms) {
    return static_cast<float>(std::sqrt(sum_squares(x) / static_cast<double>(x.size())));
  }
  double s = 0.0;  // L1 mean, serial in element order (deterministic)
  for (float v : x) s += std::fabs(v);
  return static_cast<float>(s / static_cast<double>(x.size()));
}

void SignCompressor::apply(std::span<const float> x, std::span<float> out, const RngStream&) const {
  const float a = scale_of(x);
  for (size_t k = 0; k < x.size(); ++k) out[k] = x[k] >= 0.0f ? a : -a;
}

void SignCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                            const RngStream&) const {
  const size_t nb = (x.size() + 7) / 8;
  pack_signs(x, wire.first(nb));
  const float a = scale_of(x);
  std::memcpy(wire.data() + nb, &a, 4);
}

void SignCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  const size_t nb = (out.size() + 7) / 8;
  float a;
  std::memcpy(&a, wire.data() + nb, 4);
  unpack_signs(wire.first(nb), a, out);
}

}  // namespace bitlab
