// The table of one instruction set's activation loops (activation_kernels.inc;
// the functions are those of sim/kernels/activations.hpp).
#pragma once

#include <cstddef>

namespace bitlab::isa_kernels {

struct ActivationTable {
  void (*tanh)(const float* x, float* out, size_t n);
  void (*gelu)(const float* z, float* act, size_t n);
  void (*gelu_backward)(const float* z, float* d, size_t n);
};

extern const ActivationTable activations_sse2, activations_avx2, activations_avx512;

}  // namespace bitlab::isa_kernels
