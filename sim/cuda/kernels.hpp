// CUDA kernels of the compressed optimizers, each the GPU twin of
// a CPU twin in sim/kernels/cpu_kernels.hpp with the same signature, on
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

#include "sim/core/rng.hpp"
#include "sim/kernels/elements.hpp"
#include "sim/kernels/quantize_spec.hpp"

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

// The kernels, with the references' signatures (sim/kernels/kernel_api.inc
// documents each), on device pointers. GPU specifics: the scales written by
// onebit_worker_compress / onebit_server_reduce go to device memory, and
// their per-block partial sums to a scratch buffer owned by the library
// (grown on demand: one host thread at a time); onebit_server_reduce keeps
// its sums in registers and never touches `acc` (the CPU's scratch; may be
// null); quantize_groups runs one thread block per group.
#include "sim/kernels/kernel_api.inc"

// Numbered variants of onebit_worker_compress (kernels.cu describes them):
//   1 = two passes (sum of squares + e += b, then pack + subtract) with scalar
//       accesses and shared-memory block sums;
//   2 = the same two passes with float4 accesses contiguous across each warp
//       and warp-shuffle block sums (runs variant 1 when e is not 16-byte
//       aligned).
// Both give the CPU's bits and errors (the scale within 1 ulp, as any
// in-block order of the double sum). onebit_worker_compress runs
// kWorkerCompressDefault = 2: measured faster at every size on an H200
// (bench_kernels, 2026-11-26: 15.7 vs 18.9 us at d = 2^20, 91.6 vs 166.2 us at
// 2^24, 341 vs 601 us at 2^26; docs/cuda.md). Throws std::invalid_argument for
// another variant number.
inline constexpr int kWorkerCompressVariants = 2;
inline constexpr int kWorkerCompressDefault = 2;
void onebit_worker_compress_variant(int variant, const float* b, size_t d, float* e, size_t D,
                                    uint8_t* bits, float* scale);

// ---- for the benchmark: a plain fp32 → fp16 conversion (round to nearest
// even, __float2half_rn) of n elements, the uncompressed baseline.
void fp32_to_fp16(const float* x, size_t n, uint16_t* out);

}  // namespace bitlab::cuda
