// The n-bit group quantizer's parameters (sim/compress/quantize.hpp says what
// they mean and how the wire is laid out). A plain struct here, beside the
// element arithmetic in quantize_elements.hpp, so that the CPU twins and
// the CUDA kernels can take it without including the compress layer.
#pragma once

#include <cstddef>

namespace bitlab {

struct QuantizeSpec {
  int bits = 4;             // 1..8
  size_t group_size = 128;  // elements per scale
  bool stochastic = false;  // stochastic rounding: E[Q(y)] = y inside the clamp range
  bool fp16_scale = false;  // scale on the wire as fp16 instead of fp32
};

// Groups of spec.group_size for n elements (the last one may be short): one
// scale each on the wire.
inline size_t quantize_group_count(size_t n, const QuantizeSpec& spec) {
  return (n + spec.group_size - 1) / spec.group_size;
}

}  // namespace bitlab
