// n-bit symmetric per-group quantization (docs/algorithms.md §1); the arithmetic
// and the wire layout are documented in quantize.hpp.
#include "sim/compress/quantize.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "sim/core/float16.hpp"
#include "sim/kernels/quantize_codes.hpp"
#include "sim/kernels/quantize_elements.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {
namespace {

void check_spec(const QuantizeSpec& spec) {
  if (spec.bits < 1 || spec.bits > 8 || spec.group_size < 1) {
    throw std::invalid_argument("QuantizeSpec: bits must be in [1, 8] and group_size >= 1");
  }
}

// Writes b-bit codes MSB first as one continuous bit stream.
class BitWriter {
 public:
  BitWriter(uint8_t* out, int bits) : p_(out), bits_(bits), mask_((1u << bits) - 1u) {}
  void put(int code) {
    acc_ = (acc_ << bits_) | (static_cast<uint32_t>(code) & mask_);
    nbits_ += bits_;
    while (nbits_ >= 8) {
      nbits_ -= 8;
      *p_++ = static_cast<uint8_t>(acc_ >> nbits_);
    }
  }
  void flush() {
    if (nbits_ > 0) *p_++ = static_cast<uint8_t>(acc_ << (8 - nbits_));
    nbits_ = 0;
  }

 private:
  uint8_t* p_;
  int bits_;
  uint32_t mask_;
  uint32_t acc_ = 0;
  int nbits_ = 0;
};

class BitReader {
 public:
  BitReader(const uint8_t* in, int bits) : p_(in), bits_(bits), mask_((1u << bits) - 1u) {}
  int get() {
    while (nbits_ < bits_) {
      acc_ = (acc_ << 8) | *p_++;
      nbits_ += 8;
    }
    nbits_ -= bits_;
    int code = static_cast<int>((acc_ >> nbits_) & mask_);
    if (code & (1 << (bits_ - 1))) code -= 1 << bits_;  // sign-extend
    return code;
  }

 private:
  const uint8_t* p_;
  int bits_;
  uint32_t mask_;
  uint32_t acc_ = 0;
  int nbits_ = 0;
};

}  // namespace

int64_t quantize_wire_bytes(size_t n, const QuantizeSpec& spec) {
  const size_t code_bytes = (n * static_cast<size_t>(spec.bits) + 7) / 8;
  return static_cast<int64_t>(code_bytes + quantize_group_count(n, spec) * (spec.fp16_scale ? 2u : 4u));
}

void quantize_dequantize(std::span<const float> x, std::span<float> out, const QuantizeSpec& spec,
                         const RngStream& rng, uint64_t first_index) {
  check_spec(spec);
  cpu::quantize_groups(x.data(), x.size(), out.data(), spec, rng, first_index);
}

void quantize_encode(std::span<const float> x, std::span<uint8_t> wire, const QuantizeSpec& spec,
                     const RngStream& rng) {
  check_spec(spec);
  const size_t n = x.size();
  if (wire.size() != static_cast<size_t>(quantize_wire_bytes(n, spec))) {
    throw std::invalid_argument("quantize_encode: wire has the wrong size");
  }
  const size_t g = spec.group_size;
  const size_t groups = quantize_group_count(n, spec);
  const size_t code_bytes = (n * static_cast<size_t>(spec.bits) + 7) / 8;
  uint8_t* scales = wire.data() + code_bytes;
  const GroupCoder coder(spec.bits);
  BitWriter writer(wire.data(), spec.bits);
  for (size_t j = 0; j < groups; ++j) {
    const size_t begin = j * g;
    const size_t len = std::min(g, n - begin);
    const float* y = x.data() + begin;
    uint16_t half_bits = 0;
    const float m = wire_scale(max_abs(y, len), spec.fp16_scale, &half_bits);
    if (spec.fp16_scale) {
      std::memcpy(scales + 2 * j, &half_bits, 2);
    } else {
      std::memcpy(scales + 4 * j, &m, 4);
    }
    if (m == 0.0f) {
      for (size_t k = 0; k < len; ++k) writer.put(0);
    } else if (spec.stochastic) {
      stochastic_codes(coder, y, len, m, rng, begin,
                       [&](size_t, float q) { writer.put(static_cast<int>(q)); });
    } else {
      for (size_t k = 0; k < len; ++k) writer.put(static_cast<int>(coder.nearest(y[k], m)));
    }
  }
  writer.flush();
}

void quantize_decode(std::span<const uint8_t> wire, std::span<float> out,
                     const QuantizeSpec& spec) {
  check_spec(spec);
  const size_t n = out.size();
  if (wire.size() != static_cast<size_t>(quantize_wire_bytes(n, spec))) {
    throw std::invalid_argument("quantize_decode: wire has the wrong size");
  }
  const size_t g = spec.group_size;
  const size_t groups = quantize_group_count(n, spec);
  const size_t code_bytes = (n * static_cast<size_t>(spec.bits) + 7) / 8;
  const uint8_t* scales = wire.data() + code_bytes;
  const float inv_half = 1.0f / static_cast<float>(1 << (spec.bits - 1));
  BitReader reader(wire.data(), spec.bits);
  for (size_t j = 0; j < groups; ++j) {
    const size_t begin = j * g;
    const size_t len = std::min(g, n - begin);
    float m;
    if (spec.fp16_scale) {
      uint16_t h;
      std::memcpy(&h, scales + 2 * j, 2);
      m = half_bits_to_float(h);
    } else {
      std::memcpy(&m, scales + 4 * j, 4);
    }
    float* o = out.data() + begin;
    if (m == 0.0f) {
      for (size_t k = 0; k < len; ++k) reader.get();
      std::fill(o, o + len, 0.0f);
      continue;
    }
    const float step = m * inv_half;
    for (size_t k = 0; k < len; ++k) o[k] = static_cast<float>(reader.get()) * step;
  }
}

}  // namespace bitlab
