// CUDA kernels of the compressed optimizers; see kernels.hpp for the contract
// and sim/kernels/cpu_kernels.hpp for the CPU twins. One translation unit (nvcc
// is slow; CI builds it on 2 cores). Compiled with -fmad=false (no FMA
// contraction: the CPU rounds a·b and then +c) and nvcc's default IEEE
// division and square root.
//
// Conventions (the same as the CPU's, cpu_kernels.hpp): element k of a sign
// image is bit 7 − (k & 7) of byte k >> 3; norms sum squares in double per
// block of 4096 elements counted from the buffer's start.
//
// Launch shapes: elementwise kernels use a grid-stride loop over size_t
// indices (no 32-bit overflow at 2^31+ elements); the norm kernels use one
// thread block of kThreads per 4096-element block.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/cuda/kernels.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kBlock = kSumBlock;  // 4096 elements
constexpr size_t kBlockBytes = kBlock / 8;  // 512 sign bytes
static_assert(kBlock % (8 * kThreads) == 0, "a thread handles whole bytes of one block");

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(err));
  }
}
void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

// Blocks for a grid-stride loop over n items: enough to fill the device,
// never more than the items need.
unsigned grid_for(size_t n) {
  const size_t want = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(want, 132 * 32)));
}

// The per-block partial sums of squares (doubles), grown on demand. Kernels
// on the default stream run in order, so one buffer serves every call.
double* partials(size_t count) {
  static double* buf = nullptr;
  static size_t cap = 0;
  if (count > cap) {
    if (buf) check(cudaFree(buf), "cudaFree(partials)");
    check(cudaMalloc(&buf, count * sizeof(double)), "cudaMalloc(partials)");
    cap = count;
  }
  return buf;
}

// Sum of v over the thread block (kThreads threads), valid in thread 0.
__device__ double block_sum(double v) {
  __shared__ double sh[kThreads];
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
    __syncthreads();
  }
  return sh[0];
}

// Worker side, pass 1: e[k] += b[k] for k < d (padding k ≥ d is left as is:
// adding +0 would turn a −0 error into +0, which the CPU does not do), and
// partial[blk] = Σ e[k]² in double over block blk of 4096 elements.
__global__ void worker_add_sumsq(const float* __restrict__ b, size_t d, float* __restrict__ e,
                                 size_t D, double* __restrict__ partial) {
  const size_t lo = static_cast<size_t>(blockIdx.x) * kBlock;
  const size_t hi = min(D, lo + kBlock);
  double ss = 0.0;
  for (size_t k = lo + threadIdx.x; k < hi; k += kThreads) {
    float u = e[k];
    if (k < d) {
      u += b[k];
      e[k] = u;
    }
    ss += static_cast<double>(u) * static_cast<double>(u);
  }
  const double total = block_sum(ss);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// *scale = float(sqrt(Σ partial / count)), one thread block.
__global__ void finalize_scale(const double* __restrict__ partial, size_t blocks, double count,
                               float* __restrict__ scale) {
  double s = 0.0;
  for (size_t j = threadIdx.x; j < blocks; j += kThreads) s += partial[j];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *scale = static_cast<float>(sqrt(total / count));
}

// bits = sign(u) MSB first (u ≥ 0 ⇒ 1; NaN ⇒ 0) and u −= a·sign(u), one
// byte (8 elements) per iteration; len is a multiple of 8.
__global__ void pack_subtract(float* __restrict__ u, size_t len, const float* __restrict__ scale,
                              uint8_t* __restrict__ bits) {
  const float a = *scale;
  const size_t bytes = len / 8;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float* p = u + 8 * j;
    unsigned byte = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float v = p[t];
      const bool pos = v >= 0.0f;
      byte |= static_cast<unsigned>(pos) << (7 - t);
      p[t] = v - (pos ? a : -a);
    }
    bits[j] = static_cast<uint8_t>(byte);
  }
}

// ---- 1-bit worker stage, variant 2 (onebit_worker_compress_variant): the
// passes of variant 1 (worker_add_sumsq, finalize_scale, pack_subtract) with
// 16-byte float4 loads and stores that are contiguous across a warp (variant
// 1's pack_subtract has each thread read 8 floats 32 B away from its
// neighbour's) and block sums by warp shuffles (one barrier instead of eight).
// Same element arithmetic, so the same bits and errors given the scale; the
// in-block order of the double sum differs (as variant 1's differs from the
// CPU's). Needs e 16-byte aligned (the caller checks); b is read as float4
// when it is 16-byte aligned, element by element otherwise.

// Sum of v over the thread block (kThreads threads, all of them calling),
// valid in thread 0: shuffles inside each warp, then warp 0's lane 0 adds the
// warp sums in warp order.
__device__ double block_sum_shuffle(double v) {
  constexpr int kWarps = kThreads / 32;
  __shared__ double warp_sums[kWarps];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w];
  }
  return total;
}

// Pass 1 of variant 2: as worker_add_sumsq, one thread block per 4096
// elements, float4 f covering elements 4f..4f+3 (D is a multiple of 8, so a
// block holds whole float4s). Padding components are written back unchanged.
__global__ void worker_add_sumsq_vec(const float* __restrict__ b, size_t d, bool b_aligned,
                                     float* __restrict__ e, size_t D,
                                     double* __restrict__ partial) {
  float4* e4 = reinterpret_cast<float4*>(e);
  const size_t lo = static_cast<size_t>(blockIdx.x) * (kBlock / 4);
  const size_t hi = min(D / 4, lo + kBlock / 4);
  double ss = 0.0;
  for (size_t f = lo + threadIdx.x; f < hi; f += kThreads) {
    float4 u = e4[f];
    const size_t k = 4 * f;
    if (k + 4 <= d) {
      if (b_aligned) {
        const float4 v = reinterpret_cast<const float4*>(b)[f];
        u.x += v.x;
        u.y += v.y;
        u.z += v.z;
        u.w += v.w;
      } else {
        u.x += b[k];
        u.y += b[k + 1];
        u.z += b[k + 2];
        u.w += b[k + 3];
      }
      e4[f] = u;
    } else if (k < d) {  // the float4 of element d − 1 (d − k ≤ 3 elements of b)
      u.x += b[k];
      if (k + 1 < d) u.y += b[k + 1];
      if (k + 2 < d) u.z += b[k + 2];
      e4[f] = u;
    }
    ss += static_cast<double>(u.x) * static_cast<double>(u.x);
    ss += static_cast<double>(u.y) * static_cast<double>(u.y);
    ss += static_cast<double>(u.z) * static_cast<double>(u.z);
    ss += static_cast<double>(u.w) * static_cast<double>(u.w);
  }
  const double total = block_sum_shuffle(ss);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// u − a·sign(u) of one element, accumulating its sign bit into `nibble`.
__device__ float sign_step(float v, float a, int bit, unsigned& nibble) {
  const bool pos = v >= 0.0f;
  nibble |= static_cast<unsigned>(pos) << bit;
  return v - (pos ? a : -a);
}

// Pass 2 of variant 2: thread f packs the nibble of float4 f (elements
// 4f..4f+3 → bits 3..0) and subtracts; the even lane of each pair gets its
// odd neighbour's nibble by a shuffle and writes byte f/2 (high nibble first,
// so element k is still bit 7 − k mod 8). len is a multiple of 8, so the
// float4 count is even and an even f in range has its partner in range.
// Warp-uniform trip count: every lane runs every iteration (the shuffle needs
// the whole warp); lanes past the end touch no memory. Warps start at
// multiples of 32 and the grid stride is one too, so a lane's parity is f's.
__global__ void pack_subtract_vec(float* __restrict__ u, size_t len,
                                  const float* __restrict__ scale, uint8_t* __restrict__ bits) {
  const float a = *scale;
  float4* u4 = reinterpret_cast<float4*>(u);
  const size_t count = len / 4;
  const unsigned lane = threadIdx.x & 31;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t base = blockIdx.x * static_cast<size_t>(blockDim.x) + (threadIdx.x - lane);
       base < count; base += stride) {
    const size_t f = base + lane;
    unsigned nibble = 0;
    if (f < count) {
      float4 v = u4[f];
      v.x = sign_step(v.x, a, 3, nibble);
      v.y = sign_step(v.y, a, 2, nibble);
      v.z = sign_step(v.z, a, 1, nibble);
      v.w = sign_step(v.w, a, 0, nibble);
      u4[f] = v;
    }
    const unsigned low = __shfl_down_sync(0xffffffffu, nibble, 1);
    if (f < count && (f & 1) == 0) bits[f / 2] = static_cast<uint8_t>((nibble << 4) | low);
  }
}

// Server side, pass 1, block blk of 4096 elements of the server's chunk: per
// element y = Σ_{i=0..n−1} ±a_i (fp32, from 0, in worker order, in registers),
// s ← s + y/n, partial[blk] = Σ s² in double.
__global__ void server_accumulate(const uint8_t* __restrict__ bits, size_t bits_stride,
                                  const float* __restrict__ scales, int n, size_t chunk,
                                  float* __restrict__ s, double* __restrict__ partial) {
  const size_t chunk_bytes = chunk / 8;
  const size_t first = static_cast<size_t>(blockIdx.x) * kBlockBytes;
  const size_t last = min(chunk_bytes, first + kBlockBytes);
  const float nf = static_cast<float>(n);
  double ss = 0.0;
  for (size_t j = first + threadIdx.x; j < last; j += kThreads) {
    float y[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < n; ++i) {
      const unsigned byte = bits[static_cast<size_t>(i) * bits_stride + j];
      const float a = scales[i];
#pragma unroll
      for (int t = 0; t < 8; ++t) y[t] += (byte >> (7 - t)) & 1u ? a : -a;
    }
    float* p = s + 8 * j;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      const float v = p[t] + y[t] / nf;
      p[t] = v;
      ss += static_cast<double>(v) * static_cast<double>(v);
    }
  }
  const double total = block_sum(ss);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// out[k] = ±c_r for k < d, r = k / chunk.
__global__ void decode_kernel(const uint8_t* __restrict__ bits, const float* __restrict__ scales,
                              size_t chunk, size_t d, float* __restrict__ out) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float c = scales[k / chunk];
    out[k] = (bits[k >> 3] >> (7 - (k & 7))) & 1u ? c : -c;
  }
}

__global__ void adam_kernel(float* __restrict__ x, float* __restrict__ m, float* __restrict__ v,
                            const float* __restrict__ g, size_t d, AdamCoeffs c) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    adam_step_element(x[k], m[k], v[k], g[k], c);
}

__global__ void onebit_momentum_kernel(const float* __restrict__ m, const float* __restrict__ g,
                                       size_t d, float* __restrict__ mw, AdamCoeffs c) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    mw[k] = onebit_adam_local_momentum(m[k], g[k], c);
}

__global__ void onebit_update_kernel(float* __restrict__ x, float* __restrict__ m,
                                     const float* __restrict__ v, const float* __restrict__ mask,
                                     size_t d, AdamCoeffs c) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    onebit_adam_update_element(x[k], m[k], v[k], mask ? mask + k : nullptr, c);
}

__global__ void zero_one_local_kernel(float* __restrict__ x, float* __restrict__ m,
                                      float* __restrict__ u, const float* __restrict__ g,
                                      const float* __restrict__ den, size_t d,
                                      ZeroOneLocalCoeffs c) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    zero_one_local_element(x[k], m[k], u[k], g[k], den[k], c);
}

__global__ void zero_one_scale_kernel(float* __restrict__ u, const float* __restrict__ den,
                                      size_t d) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    u[k] *= den[k];
}

__global__ void zero_one_sync_kernel(float* __restrict__ m0, float* __restrict__ x,
                                     const float* __restrict__ ubar, const float* __restrict__ den,
                                     size_t d, double lrs) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < d;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    zero_one_sync_element(m0[k], x[k], ubar[k], den[k], lrs);
}

// One byte (8 elements, Philox blocks 2j and 2j+1) per iteration, as
// cpu::binarize_pack; unused low bits of the last byte are 0.
__global__ void binarize_kernel(const float* __restrict__ z, size_t d, RngStream rng,
                                uint8_t* __restrict__ bits) {
  const size_t bytes = (d + 7) / 8;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < bytes;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const PhiloxBlock r0 = rng.block(2 * j), r1 = rng.block(2 * j + 1);
    const uint32_t draws[8] = {r0[0], r0[1], r0[2], r0[3], r1[0], r1[1], r1[2], r1[3]};
    unsigned byte = 0;
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      if (8 * j + t < d)
        byte |= static_cast<unsigned>(binarize_one(z[8 * j + t], draws[t])) << (7 - t);
    }
    bits[j] = static_cast<uint8_t>(byte);
  }
}

constexpr int kQuantThreads = 128;

// One group of g elements per iteration of a thread block: M = max |y| over
// the group (on the bit patterns, as the CPU's max_abs), the wire scale, then
// each thread quantizes its own elements. x and out may alias: every read of
// the group for M happens before the barrier that precedes any write, and an
// element is read and written by the same thread.
__global__ void quantize_kernel(const float* x, size_t n, float* out, size_t g, int bits,
                                bool stochastic, bool fp16, RngStream rng, uint64_t first_index) {
  __shared__ uint32_t sh[kQuantThreads];
  const GroupCoder coder(bits);
  const float inv_half = 1.0f / coder.half_range;  // exact: a power of two
  const size_t groups = (n + g - 1) / g;
  for (size_t j = blockIdx.x; j < groups; j += gridDim.x) {
    const size_t begin = j * g, len = min(g, n - begin);
    uint32_t mb = 0;
    for (size_t k = threadIdx.x; k < len; k += kQuantThreads) {
      const uint32_t a = abs_bits(x[begin + k]);
      mb = a > mb ? a : mb;
    }
    sh[threadIdx.x] = mb;
    __syncthreads();
    for (int w = kQuantThreads / 2; w > 0; w /= 2) {
      if (threadIdx.x < w && sh[threadIdx.x + w] > sh[threadIdx.x])
        sh[threadIdx.x] = sh[threadIdx.x + w];
      __syncthreads();
    }
    uint16_t unused;
    const float m = wire_scale(std::bit_cast<float>(sh[0]), fp16, &unused);
    __syncthreads();  // sh[0] is read by all before the next group overwrites it
    if (m == 0.0f) {  // all-zero group
      for (size_t k = threadIdx.x; k < len; k += kQuantThreads) out[begin + k] = 0.0f;
      continue;
    }
    const float step = m * inv_half;
    for (size_t k = threadIdx.x; k < len; k += kQuantThreads) {
      const uint32_t draw = stochastic ? rng.block(first_index + begin + k)[0] : 0u;
      out[begin + k] = quantize_element(coder, x[begin + k], m, step, stochastic, draw);
    }
  }
}

__global__ void ema_error_kernel(float* __restrict__ e, const float* __restrict__ h,
                                 const float* __restrict__ ch, size_t n, float b, float c) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    e[k] = ema_error_element(e[k], h[k], ch[k], b, c);
}

// LoCo's dequantize-reduce: out[k] = (Σ_i q_i[k]) / n with the sum in the
// CPU's pairwise-tree order (the postfix program of worker_tree_program,
// in device memory; every thread walks the same program, so there is no
// divergence, and the loads of worker i's values are coalesced across the
// warp). The division by fl(n) is the CPU's too. The value stack is indexed
// at run time, so it lives in local memory (128 B a thread, ptxas -v; L1
// traffic, not DRAM); a variant holding it in registers for small fixed n is
// an idea not tried here.
__global__ void dequantize_reduce_kernel(const float* __restrict__ q, size_t stride,
                                         const int32_t* __restrict__ program, size_t length,
                                         size_t len, float nf, float* __restrict__ out) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < len;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[k] = worker_tree_sum(program, length, q + k, stride) / nf;
}

// The tree program for n workers on the device, rebuilt only when n changes.
// The upload is a synchronous cudaMemcpy on the default stream, so it waits
// for a queued kernel still reading the previous program.
const int32_t* worker_tree_on_device(int n) {
  static int32_t* buf = nullptr;
  static size_t cap = 0;
  static int cached_n = 0;
  if (n != cached_n) {
    const std::vector<int32_t> program = worker_tree_program(n);
    if (program.size() > cap) {
      if (buf) check(cudaFree(buf), "cudaFree(worker tree)");
      buf = nullptr;
      cap = 0;
      check(cudaMalloc(&buf, program.size() * sizeof(int32_t)), "cudaMalloc(worker tree)");
      cap = program.size();
    }
    check(cudaMemcpy(buf, program.data(), program.size() * sizeof(int32_t), cudaMemcpyHostToDevice),
          "cudaMemcpy(worker tree)");
    cached_n = n;
  }
  return buf;
}

__global__ void fp16_kernel(const float* __restrict__ x, size_t n, uint16_t* __restrict__ out) {
  for (size_t k = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[k] = __half_as_ushort(__float2half_rn(x[k]));
}

}  // namespace

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    cudaGetLastError();  // clear it, so that later calls do not report it again
    return false;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount: 0 devices";
    return false;
  }
  return true;
}

std::string device_name() {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, 0), "cudaGetDeviceProperties");
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ")";
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  return p;
}
void device_free(void* p) {
  cudaFree(p);
}
void copy_to_device(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}
void device_memset(void* p, int value, size_t bytes) {
  check(cudaMemset(p, value, bytes), "cudaMemset");
}
void device_synchronize() {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void onebit_worker_compress_variant(int variant, const float* b, size_t d, float* e, size_t D,
                                    uint8_t* bits, float* scale) {
  if (variant < 1 || variant > kWorkerCompressVariants)
    throw std::invalid_argument("onebit_worker_compress_variant: variant " +
                                std::to_string(variant) + " does not exist (1 or 2)");
  const auto aligned16 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  // Variant 2 needs float4 access to e; without it variant 1 runs.
  const bool vec = variant == 2 && aligned16(e);
  const size_t blocks = (D + kBlock - 1) / kBlock;
  double* part = partials(blocks);
  if (vec) {
    worker_add_sumsq_vec<<<static_cast<unsigned>(blocks), kThreads>>>(b, d, aligned16(b), e, D,
                                                                      part);
    check_launch("worker_add_sumsq_vec");
  } else {
    worker_add_sumsq<<<static_cast<unsigned>(blocks), kThreads>>>(b, d, e, D, part);
    check_launch("worker_add_sumsq");
  }
  finalize_scale<<<1, kThreads>>>(part, blocks, static_cast<double>(D), scale);
  check_launch("finalize_scale");
  if (vec) {
    pack_subtract_vec<<<grid_for(D / 4), kThreads>>>(e, D, scale, bits);
    check_launch("pack_subtract_vec");
  } else {
    pack_subtract<<<grid_for(D / 8), kThreads>>>(e, D, scale, bits);
    check_launch("pack_subtract");
  }
}

void onebit_worker_compress(const float* b, size_t d, float* e, size_t D, uint8_t* bits,
                            float* scale) {
  onebit_worker_compress_variant(kWorkerCompressDefault, b, d, e, D, bits, scale);
}

void onebit_server_reduce(const uint8_t* bits, size_t bits_stride, const float* scales, int n,
                          size_t chunk, float* s, float* /*acc: sums stay in registers*/,
                          uint8_t* out_bits, float* out_scale) {
  const size_t blocks = (chunk + kBlock - 1) / kBlock;
  double* part = partials(blocks);
  server_accumulate<<<static_cast<unsigned>(blocks), kThreads>>>(bits, bits_stride, scales, n,
                                                                 chunk, s, part);
  check_launch("server_accumulate");
  finalize_scale<<<1, kThreads>>>(part, blocks, static_cast<double>(chunk), out_scale);
  check_launch("finalize_scale");
  pack_subtract<<<grid_for(chunk / 8), kThreads>>>(s, chunk, out_scale, out_bits);
  check_launch("pack_subtract");
}

void onebit_decode(const uint8_t* server_bits, const float* server_scales, int n, size_t D,
                   size_t d, float* out) {
  decode_kernel<<<grid_for(d), kThreads>>>(server_bits, server_scales, D / n, d, out);
  check_launch("decode_kernel");
}

void adam_update(float* x, float* m, float* v, const float* g, size_t d, const AdamCoeffs& c) {
  adam_kernel<<<grid_for(d), kThreads>>>(x, m, v, g, d, c);
  check_launch("adam_kernel");
}

void onebit_adam_momentum(const float* m, const float* g, size_t d, float* m_worker,
                          const AdamCoeffs& c) {
  onebit_momentum_kernel<<<grid_for(d), kThreads>>>(m, g, d, m_worker, c);
  check_launch("onebit_momentum_kernel");
}

void onebit_adam_update(float* x, float* m, const float* v, const float* mask, size_t d,
                        const AdamCoeffs& c) {
  onebit_update_kernel<<<grid_for(d), kThreads>>>(x, m, v, mask, d, c);
  check_launch("onebit_update_kernel");
}

void zero_one_local_step(float* x, float* m, float* u, const float* g, const float* den, size_t d,
                         const ZeroOneLocalCoeffs& c) {
  zero_one_local_kernel<<<grid_for(d), kThreads>>>(x, m, u, g, den, d, c);
  check_launch("zero_one_local_kernel");
}

void zero_one_scale_u(float* u, const float* den, size_t d) {
  zero_one_scale_kernel<<<grid_for(d), kThreads>>>(u, den, d);
  check_launch("zero_one_scale_kernel");
}

void zero_one_sync(float* m0, float* x, const float* ubar, const float* den, size_t d, double lrs) {
  zero_one_sync_kernel<<<grid_for(d), kThreads>>>(m0, x, ubar, den, d, lrs);
  check_launch("zero_one_sync_kernel");
}

void binarize_pack(const float* z, size_t d, const RngStream& rng, uint8_t* bits) {
  binarize_kernel<<<grid_for((d + 7) / 8), kThreads>>>(z, d, rng, bits);
  check_launch("binarize_kernel");
}

void quantize_groups(const float* x, size_t n, float* out, const QuantizeSpec& spec,
                     const RngStream& rng, uint64_t first_index) {
  if (spec.bits < 1 || spec.bits > 8 || spec.group_size < 1)
    throw std::invalid_argument(
        "cuda::quantize_groups: bits must be in [1, 8] and group_size >= 1");
  if (n == 0) return;
  const size_t groups = (n + spec.group_size - 1) / spec.group_size;
  const unsigned grid = static_cast<unsigned>(std::min<size_t>(groups, 132 * 64));
  quantize_kernel<<<grid, kQuantThreads>>>(x, n, out, spec.group_size, spec.bits, spec.stochastic,
                                           spec.fp16_scale, rng, first_index);
  check_launch("quantize_kernel");
}

void ema_error_update(float* e, const float* h, const float* ch, size_t n, float beta) {
  ema_error_kernel<<<grid_for(n), kThreads>>>(e, h, ch, n, beta, 1.0f - beta);
  check_launch("ema_error_kernel");
}

void dequantize_reduce(const float* q, size_t q_stride, int n, size_t len, float* out) {
  if (len == 0) return;
  const int32_t* program = worker_tree_on_device(n);  // throws for n outside [1, 2^30]
  dequantize_reduce_kernel<<<grid_for(len), kThreads>>>(
      q, q_stride, program, 2 * static_cast<size_t>(n) - 1, len, static_cast<float>(n), out);
  check_launch("dequantize_reduce_kernel");
}

void fp32_to_fp16(const float* x, size_t n, uint16_t* out) {
  fp16_kernel<<<grid_for(n), kThreads>>>(x, n, out);
  check_launch("fp16_kernel");
}

}  // namespace bitlab::cuda
