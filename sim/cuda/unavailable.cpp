// The CUDA entry points when the kernels are not built (BITLAB_CUDA=OFF, or
// AUTO without nvcc): device_available() says so; everything else throws, and
// callers (the `cuda` test suite, the benchmark) check availability first.
#include <stdexcept>

#include "sim/cuda/kernels.hpp"

namespace bitlab::cuda {
namespace {
[[noreturn]] void unavailable(const char* what) {
  throw std::logic_error(std::string("bitlab::cuda::") + what +
                         ": built without CUDA (configure with -DBITLAB_CUDA=ON)");
}
}  // namespace

bool device_available(std::string* why) {
  if (why) *why = "built without CUDA (BITLAB_CUDA=OFF, or AUTO found no nvcc)";
  return false;
}
std::string device_name() {
  unavailable("device_name");
}
void* device_alloc(size_t) {
  unavailable("device_alloc");
}
void device_free(void*) {}
void copy_to_device(void*, const void*, size_t) {
  unavailable("copy_to_device");
}
void copy_to_host(void*, const void*, size_t) {
  unavailable("copy_to_host");
}
void device_memset(void*, int, size_t) {
  unavailable("device_memset");
}
void device_synchronize() {
  unavailable("device_synchronize");
}
void onebit_worker_compress(const float*, size_t, float*, size_t, uint8_t*, float*) {
  unavailable("onebit_worker_compress");
}
void onebit_worker_compress_variant(int, const float*, size_t, float*, size_t, uint8_t*, float*) {
  unavailable("onebit_worker_compress_variant");
}
void onebit_server_reduce(const uint8_t*, size_t, const float*, int, size_t, float*, float*,
                          uint8_t*, float*) {
  unavailable("onebit_server_reduce");
}
void onebit_decode(const uint8_t*, const float*, int, size_t, size_t, float*) {
  unavailable("onebit_decode");
}
void adam_update(float*, float*, float*, const float*, size_t, const AdamCoeffs&) {
  unavailable("adam_update");
}
void onebit_adam_momentum(const float*, const float*, size_t, float*, const AdamCoeffs&) {
  unavailable("onebit_adam_momentum");
}
void onebit_adam_update(float*, float*, const float*, const float*, size_t, const AdamCoeffs&) {
  unavailable("onebit_adam_update");
}
void zero_one_local_step(float*, float*, float*, const float*, const float*, size_t,
                         const ZeroOneLocalCoeffs&) {
  unavailable("zero_one_local_step");
}
void zero_one_scale_u(float*, const float*, size_t) {
  unavailable("zero_one_scale_u");
}
void zero_one_sync(float*, float*, const float*, const float*, size_t, double) {
  unavailable("zero_one_sync");
}
void binarize_pack(const float*, size_t, const RngStream&, uint8_t*) {
  unavailable("binarize_pack");
}
void quantize_groups(const float*, size_t, float*, const QuantizeSpec&, const RngStream&,
                     uint64_t) {
  unavailable("quantize_groups");
}
void ema_error_update(float*, const float*, const float*, size_t, float) {
  unavailable("ema_error_update");
}
void dequantize_reduce(const float*, size_t, int, size_t, float*) {
  unavailable("dequantize_reduce");
}
void fp32_to_fp16(const float*, size_t, uint16_t*) {
  unavailable("fp32_to_fp16");
}

}  // namespace bitlab::cuda
