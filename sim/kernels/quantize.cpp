// The n-bit group quantizer's loop (the CPU twin of the CUDA quantizer,
// declared in kernel_api.inc; sim/compress/quantize.hpp documents the
// arithmetic and the wire, and its quantize_dequantize checks the spec and
// calls this).
#include <algorithm>
#include <cstdint>

#include "sim/kernels/dispatch.hpp"
#include "sim/kernels/quantize_codes.hpp"
#include "sim/kernels/cpu_kernels.hpp"

namespace bitlab {

void cpu::quantize_groups(const float* xp, size_t n, float* outp, const QuantizeSpec& spec,
                          const RngStream& rng, uint64_t first_index) {
  const size_t g = spec.group_size;
  const int64_t groups = static_cast<int64_t>(quantize_group_count(n, spec));
  const GroupCoder coder(spec.bits);
  const float inv_half = 1.0f / coder.half_range;  // exact: a power of two
  const isa_kernels::KernelTable& t = isa_kernels::active_kernels();
  // Groups are independent, so splitting them over threads changes nothing.
  // x and out may alias: a group is read (max) before it is written, and
  // element k is read before out[k] is written.
#pragma omp parallel for schedule(static) if (n >= (size_t{1} << 16) && groups >= 16)
  for (int64_t j = 0; j < groups; ++j) {
    const size_t begin = static_cast<size_t>(j) * g;
    const size_t len = std::min(g, n - begin);
    const float* y = xp + begin;
    float* o = outp + begin;
    uint16_t unused;
    const float m = wire_scale(t.max_abs(y, len), spec.fp16_scale, &unused);
    if (m == 0.0f) {  // all-zero group (fp16: only when M itself is 0)
      std::fill(o, o + len, 0.0f);
      continue;
    }
    const float step = m * inv_half;
    if (spec.stochastic) {
      stochastic_codes(coder, y, len, m, rng, first_index + begin,
                       [&](size_t k, float q) { o[k] = q * step; });
    } else {
      t.quantize_nearest(y, len, coder, m, step, o);
    }
  }
}

}  // namespace bitlab
