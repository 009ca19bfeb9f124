// The compressors other than sign (docs/algorithms.md §1, §7); see compressors.hpp.
#include "sim/compress/compressors.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <vector>

#include "sim/core/float16.hpp"
#include "sim/kernels/elements.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {
namespace {

void check_wire(std::span<const uint8_t> wire, int64_t expected, const char* who) {
  if (static_cast<int64_t>(wire.size()) != expected) {
    throw std::invalid_argument(std::string(who) + ": wire has " + std::to_string(wire.size()) +
                                " bytes, expected " + std::to_string(expected));
  }
}

void check_index_range(size_t n) {
  if (n > UINT32_MAX) throw std::invalid_argument("sparse compressors need n < 2^32");
}

// Writes out = x at the ascending `indices` and 0 elsewhere, times `scale`.
// Safe when out aliases x: each kept element is read before it is written and
// only the gaps are zeroed.
void scatter_kept(std::span<const float> x, std::span<float> out, std::span<const uint32_t> indices,
                  float scale) {
  size_t prev = 0;
  for (uint32_t i : indices) {
    std::fill(out.begin() + prev, out.begin() + i, 0.0f);
    out[i] = x[i] * scale;
    prev = size_t{i} + 1;
  }
  std::fill(out.begin() + prev, out.end(), 0.0f);
}

// Scratch reused by the sparsifiers: grown once per thread, never shrunk, so
// apply() allocates only the first time it sees a larger n.
thread_local std::vector<uint64_t> tl_keys;
thread_local std::vector<uint32_t> tl_indices;
thread_local std::vector<uint64_t> tl_bitmap;

// The k largest |x| (ties: lower index first), as ascending indices. Keys
// pack |x|'s bit pattern (a total order on magnitudes, NaN above inf) over
// the complemented index, so one integer comparison decides both magnitude
// and the tie rule, and nth_element needs no indirection.
std::span<const uint32_t> topk_indices(std::span<const float> x, size_t k) {
  const size_t n = x.size();
  check_index_range(n);
  if (tl_keys.size() < n) tl_keys.resize(n);
  if (tl_indices.size() < k) tl_indices.resize(k);
  uint64_t* keys = tl_keys.data();
  for (size_t i = 0; i < n; ++i) {
    const uint64_t mag = std::bit_cast<uint32_t>(x[i]) & 0x7FFFFFFFu;
    keys[i] = mag << 32 | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  }
  if (k < n) std::nth_element(keys, keys + k, keys + n, std::greater<uint64_t>());
  uint32_t* idx = tl_indices.data();
  for (size_t j = 0; j < k; ++j) idx[j] = 0xFFFFFFFFu - static_cast<uint32_t>(keys[j]);
  std::sort(idx, idx + k);
  return {idx, k};
}

}  // namespace

// ---- identity ---------------------------------------------------------------

void IdentityCompressor::apply(std::span<const float> x, std::span<float> out,
                               const RngStream&) const {
  if (out.data() != x.data()) std::copy(x.begin(), x.end(), out.begin());
}

void IdentityCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                                const RngStream&) const {
  check_wire(wire, wire_bytes(x.size()), "identity encode");
  if (!x.empty()) std::memcpy(wire.data(), x.data(), 4 * x.size());
}

void IdentityCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  check_wire(wire, wire_bytes(out.size()), "identity decode");
  if (!out.empty()) std::memcpy(out.data(), wire.data(), 4 * out.size());
}

// ---- fp16 / bf16 casts ------------------------------------------------------

void CastCompressor::apply(std::span<const float> x, std::span<float> out, const RngStream&) const {
  const size_t n = x.size();
  if (type_ == Type::kFp16) {
    for (size_t k = 0; k < n; ++k) out[k] = round_to_half(x[k]);
  } else {
    for (size_t k = 0; k < n; ++k) out[k] = round_to_bf16(x[k]);
  }
}

void CastCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                            const RngStream&) const {
  check_wire(wire, wire_bytes(x.size()), "cast encode");
  uint8_t* p = wire.data();
  for (size_t k = 0; k < x.size(); ++k, p += 2) {
    const uint16_t h = type_ == Type::kFp16 ? float_to_half_bits(x[k]) : float_to_bf16_bits(x[k]);
    std::memcpy(p, &h, 2);
  }
}

void CastCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  check_wire(wire, wire_bytes(out.size()), "cast decode");
  const uint8_t* p = wire.data();
  for (size_t k = 0; k < out.size(); ++k, p += 2) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    out[k] = type_ == Type::kFp16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
  }
}

// ---- n-bit ------------------------------------------------------------------

QuantizeSpec NbitOptions::spec() const {
  QuantizeSpec s;
  s.bits = static_cast<int>(bits);
  s.group_size = static_cast<size_t>(group_size);
  s.stochastic = rounding == "stochastic";
  s.fp16_scale = scale_dtype == "fp16";
  return s;
}

void NbitCompressor::apply(std::span<const float> x, std::span<float> out,
                           const RngStream& rng) const {
  quantize_dequantize(x, out, spec_, rng, 0);
}

void NbitCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                            const RngStream& rng) const {
  quantize_encode(x, wire, spec_, rng);
}

void NbitCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  quantize_decode(wire, out, spec_);
}

// ---- top-k ------------------------------------------------------------------

size_t sparse_count(size_t n, double ratio, int64_t k_option) {
  if (n == 0) return 0;
  if (k_option > 0) return std::min(n, static_cast<size_t>(k_option));
  const double k = std::round(ratio * static_cast<double>(n));
  return std::min(n, std::max<size_t>(1, static_cast<size_t>(k)));
}

void TopkCompressor::apply(std::span<const float> x, std::span<float> out, const RngStream&) const {
  scatter_kept(x, out, topk_indices(x, count(x.size())), 1.0f);
}

void TopkCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                            const RngStream&) const {
  check_wire(wire, wire_bytes(x.size()), "topk encode");
  const auto idx = topk_indices(x, count(x.size()));
  const size_t k = idx.size();
  for (size_t j = 0; j < k; ++j) std::memcpy(wire.data() + 4 * j, &x[idx[j]], 4);
  if (k) std::memcpy(wire.data() + 4 * k, idx.data(), 4 * k);
}

void TopkCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  check_wire(wire, wire_bytes(out.size()), "topk decode");
  const size_t k = count(out.size());
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < k; ++j) {
    float v;
    uint32_t i;
    std::memcpy(&v, wire.data() + 4 * j, 4);
    std::memcpy(&i, wire.data() + 4 * (k + j), 4);
    if (i >= out.size()) throw std::invalid_argument("topk decode: index out of range");
    out[i] = v;
  }
}

// ---- random-k ---------------------------------------------------------------

float RandomkCompressor::value_scale(size_t n) const {
  const size_t k = count(n);
  return opts_.rescale && k > 0 ? static_cast<float>(static_cast<double>(n) / k) : 1.0f;
}

std::span<const uint32_t> RandomkCompressor::indices(size_t n, const RngStream& rng) const {
  check_index_range(n);
  const size_t k = count(n);
  const size_t words = (n + 63) / 64;
  if (tl_bitmap.size() < words) tl_bitmap.resize(words);
  if (tl_indices.size() < k) tl_indices.resize(k);
  uint64_t* bitmap = tl_bitmap.data();
  std::fill(bitmap, bitmap + words, 0);
  // Floyd's algorithm: k draws, each a uniform index; the result is a
  // uniformly random k-subset. The sequential draws come from a copy, so the
  // caller's stream is not advanced (the same stream gives the same set).
  RngStream draws = rng;
  for (size_t j = n - k; j < n; ++j) {
    size_t t = static_cast<size_t>(draws.next_below(j + 1));
    if (bitmap[t / 64] >> (t % 64) & 1u) t = j;
    bitmap[t / 64] |= uint64_t{1} << (t % 64);
  }
  uint32_t* idx = tl_indices.data();
  size_t m = 0;
  for (size_t w = 0; w < words; ++w) {
    for (uint64_t b = bitmap[w]; b; b &= b - 1) {
      idx[m++] = static_cast<uint32_t>(w * 64 + std::countr_zero(b));
    }
  }
  return {idx, m};
}

void RandomkCompressor::apply(std::span<const float> x, std::span<float> out,
                              const RngStream& rng) const {
  scatter_kept(x, out, indices(x.size(), rng), value_scale(x.size()));
}

void RandomkCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                               const RngStream& rng) const {
  check_wire(wire, wire_bytes(x.size()), "randomk encode");
  const auto idx = indices(x.size(), rng);
  const size_t k = idx.size();
  // Raw values go on the wire; the receiver applies the n/k factor.
  for (size_t j = 0; j < k; ++j) std::memcpy(wire.data() + 4 * j, &x[idx[j]], 4);
  if (!opts_.shared_seed && k) std::memcpy(wire.data() + 4 * k, idx.data(), 4 * k);
}

void RandomkCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  if (opts_.shared_seed) {
    throw std::logic_error(
        "randomk with shared_seed: the receiver needs the shared stream; call "
        "decode_shared(wire, out, rng)");
  }
  check_wire(wire, wire_bytes(out.size()), "randomk decode");
  const size_t k = count(out.size());
  const float scale = value_scale(out.size());
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < k; ++j) {
    float v;
    uint32_t i;
    std::memcpy(&v, wire.data() + 4 * j, 4);
    std::memcpy(&i, wire.data() + 4 * (k + j), 4);
    if (i >= out.size()) throw std::invalid_argument("randomk decode: index out of range");
    out[i] = v * scale;
  }
}

void RandomkCompressor::decode_shared(std::span<const uint8_t> wire, std::span<float> out,
                                      const RngStream& rng) const {
  if (!opts_.shared_seed) return decode(wire, out);
  check_wire(wire, wire_bytes(out.size()), "randomk decode");
  const auto idx = indices(out.size(), rng);
  const float scale = value_scale(out.size());
  std::fill(out.begin(), out.end(), 0.0f);
  for (size_t j = 0; j < idx.size(); ++j) {
    float v;
    std::memcpy(&v, wire.data() + 4 * j, 4);
    out[idx[j]] = v * scale;
  }
}

// ---- binarize ---------------------------------------------------------------

namespace {
// Calls f(k, q_k) for every element, four elements per Philox block. The
// draws of a chunk are made in a loop of their own so that it vectorises.
template <class F>
void binarize_each(std::span<const float> x, const RngStream& rng, F&& f) {
  constexpr size_t kChunk = 256;  // elements; a multiple of 4
  uint32_t draws[kChunk];
  const size_t n = x.size();
  for (size_t c0 = 0; c0 < n; c0 += kChunk) {
    const size_t c = std::min(kChunk, n - c0);
    for (size_t b = 0; b < (c + 3) / 4; ++b) {
      const PhiloxBlock r = rng.block(c0 / 4 + b);
      draws[4 * b] = r[0];
      draws[4 * b + 1] = r[1];
      draws[4 * b + 2] = r[2];
      draws[4 * b + 3] = r[3];
    }
    for (size_t k = 0; k < c; ++k) f(c0 + k, binarize_one(x[c0 + k], draws[k]));
  }
}
}  // namespace

void BinarizeCompressor::apply(std::span<const float> x, std::span<float> out,
                               const RngStream& rng) const {
  binarize_each(x, rng, [&](size_t k, bool plus) { out[k] = plus ? 1.0f : -1.0f; });
}

void BinarizeCompressor::encode(std::span<const float> x, std::span<uint8_t> wire,
                                const RngStream& rng) const {
  check_wire(wire, wire_bytes(x.size()), "binarize encode");
  // pack_signs convention: MSB first, bit set = +1, unused low bits 0; the
  // CPU twin of the CUDA kernel (sim/kernels/cpu_kernels.hpp).
  cpu::binarize_pack(x.data(), x.size(), rng, wire.data());
}

void BinarizeCompressor::decode(std::span<const uint8_t> wire, std::span<float> out) const {
  check_wire(wire, wire_bytes(out.size()), "binarize decode");
  unpack_signs(wire, 1.0f, out);
}

}  // namespace bitlab
