#include "sim/kernels/activations.hpp"

#include <stdexcept>
#include <string>

#include "sim/kernels/activation_table.hpp"

namespace bitlab {

namespace {
const isa_kernels::ActivationTable& table_for(Isa isa) {
  return *for_isa(isa, &isa_kernels::activations_sse2, &isa_kernels::activations_avx2,
                  &isa_kernels::activations_avx512);
}
const isa_kernels::ActivationTable& active_activations() {
  static const isa_kernels::ActivationTable& table = table_for(active_isa());
  return table;
}
}  // namespace

void tanh_array(const float* x, float* out, size_t n) { active_activations().tanh(x, out, n); }
void gelu_tanh(const float* z, float* act, size_t n) { active_activations().gelu(z, act, n); }
void gelu_tanh_backward(const float* z, float* d, size_t n) { active_activations().gelu_backward(z, d, n); }

void activation_isa(Isa isa, ActivationLoop loop, const float* in, float* out, size_t n) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("activation_isa: instruction set ") + isa_name(isa) +
                                " is not supported by this CPU");
  const isa_kernels::ActivationTable& t = table_for(isa);
  switch (loop) {
    case ActivationLoop::kTanh:
      return t.tanh(in, out, n);
    case ActivationLoop::kGelu:
      return t.gelu(in, out, n);
    case ActivationLoop::kGeluBackward:
      return t.gelu_backward(in, out, n);
  }
}

}  // namespace bitlab
