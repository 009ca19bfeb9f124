// CUDA kernels of the compressed optimizers (issue #9), each the GPU twin of
// a CPU reference in sim/kernels/reference.hpp with the same signature, on
// device pointers. Plain C++: the simulator and the tests include it without
// nvcc. Built by BITLAB_CUDA=AUTO|ON (sim/cuda/kernels.cu); without CUDA
// (sim/cuda/unavailable.cpp) device_available() says why and every other
// function throws.
//
// What is bit-identical to the CPU and what is not (the `cuda` test suite
// checks exactly this):
//   - packed sign bits, the errors and every elementwise update: bit for bit,
//     given the same scales (the element code is shared, sim/kernels/
//     elements.hpp; -fmad=false; IEEE division and sqrt);
//   - the scales a = ‖u‖/√D and c = ‖y‖/√chunk: the squares are summed in
//     double per 4096-block (as on the CPU) but inside a block in a tree
//     order, not the CPU's (compiler-chosen) SIMD order. The double sums
//     differ by a few ulps of a double, far below the float rounding of the
//     scale, so the float scale is equal except when the exact value lies
//     within ~1e-13 relative of a float rounding boundary; the tests allow
//     1 ulp of the scale and then compare the errors against the scale used.
// The kernel functions are asynchronous: they queue kernels on the default
// stream, which run in order; the copies (copy_to_host, ...) and
// device_synchronize() wait for them. Launch errors throw std::runtime_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "sim/kernels/elements.hpp"
#include "sim/quantize.hpp"
#include "sim/rng.hpp"

namespace bitlab::cuda {

// True when the kernels were built and a CUDA device answers; otherwise
// false with the reason in *why (e.g. "cudaGetDeviceCount: no CUDA-capable
// device is detected").
bool device_available(std::string* why);
// "NVIDIA H100 80GB HBM3 (sm_90)".
std::string device_name();

// Device memory, raw. All throw std::runtime_error naming the CUDA error.
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void device_memset(void* p, int value, size_t bytes);
void device_synchronize();

// RAII owner of `count` device elements of T.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t count) : count_(count) {
    if (count) p_ = static_cast<T*>(device_alloc(count * sizeof(T)));
  }
  DeviceArray(const T* host, size_t count) : DeviceArray(count) { upload(host); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept
      : p_(std::exchange(o.p_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(count_, o.count_);
    return *this;
  }
  ~DeviceArray() {
    if (p_) device_free(p_);
  }
  T* get() const { return p_; }
  size_t size() const { return count_; }
  void upload(const T* host) {
    if (count_) copy_to_device(p_, host, count_ * sizeof(T));
  }
  void download(T* host) const {
    if (count_) copy_to_host(host, p_, count_ * sizeof(T));
  }
  void zero() {
    if (count_) device_memset(p_, 0, count_ * sizeof(T));
  }

 private:
  T* p_ = nullptr;
  size_t count_ = 0;
};

// ---- 1-bit allreduce (algorithms.md §1); see the CPU references.

// Worker side: e ← u = pad(b) + e; *scale = ‖u‖/√D; bits = sign(u);
// e ← u − a·sign(u). `scale` is a device pointer. The per-block partial sums
// live in a scratch buffer owned by the library, grown on demand: one host
// thread at a time.
void onebit_worker_compress(const float* b, size_t d, float* e, size_t D, uint8_t* bits,
                            float* scale);
// Server side of one server (scales: n device floats). `acc` is the CPU's
// scratch; the GPU keeps the sums in registers and never touches it.
void onebit_server_reduce(const uint8_t* bits, size_t bits_stride, const float* scales, int n,
                          size_t chunk, float* s, float* acc, uint8_t* out_bits, float* out_scale);
// Final unpack of the gathered image.
void onebit_decode(const uint8_t* server_bits, const float* server_scales, int n, size_t D,
                   size_t d, float* out);

// ---- fused optimizer updates.
void adam_update(float* x, float* m, float* v, const float* g, size_t d, const AdamCoeffs& c);
void onebit_adam_momentum(const float* m, const float* g, size_t d, float* m_worker,
                          const AdamCoeffs& c);
void onebit_adam_update(float* x, float* m, const float* v, const float* mask, size_t d,
                        const AdamCoeffs& c);
void zero_one_local_step(float* x, float* m, float* u, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c);
void zero_one_scale_u(float* u, const float* den, size_t d);
void zero_one_sync(float* m0, float* x, const float* ubar, const float* den, size_t d, double lrs);
// BinSGDM's randomized binarization, packed, with the CPU's Philox draws.
void binarize_pack(const float* z, size_t d, const RngStream& rng, uint8_t* bits);

// ---- LoCo: n-bit group quantization (nearest or stochastic, fp32 or fp16
// scales; one thread block per group) and the moving-average error feedback.
void quantize_groups(const float* x, size_t n, float* out, const QuantizeSpec& spec,
                     const RngStream& rng, uint64_t first_index);
void ema_error_update(float* e, const float* h, const float* ch, size_t n, float beta);

// ---- for the benchmark: a plain fp32 → fp16 conversion (round to nearest
// even, __float2half_rn) of n elements, the uncompressed baseline.
void fp32_to_fp16(const float* x, size_t n, uint16_t* out);

}  // namespace bitlab::cuda
