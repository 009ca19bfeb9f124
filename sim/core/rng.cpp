#include "sim/core/rng.hpp"

#include <stdexcept>

#include "sim/core/normal_math.hpp"

namespace bitlab {

namespace isa_kernels {
// sim/core/normal_{sse2,avx2,avx512}.cpp: one source, three instruction sets.
using NormalBlocks = void(uint32_t, uint32_t, uint32_t, uint32_t, uint64_t, size_t, float, float*);
NormalBlocks normal_blocks_sse2, normal_blocks_avx2, normal_blocks_avx512;
}  // namespace isa_kernels

namespace {

isa_kernels::NormalBlocks* normal_kernel(Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("fill_normal: instruction set ") + isa_name(isa) +
                                " is not supported by this CPU");
  switch (isa) {
    case Isa::kAvx512:
      return isa_kernels::normal_blocks_avx512;
    case Isa::kAvx2:
      return isa_kernels::normal_blocks_avx2;
    case Isa::kSse2:
      break;
  }
  return isa_kernels::normal_blocks_sse2;
}

// Elements [g, g + count) of one block, the scalar way (the head and tail of a
// range that does not start or end on a block boundary).
void partial_block(const RngStream& rng, uint64_t g, size_t count, float scale, float* out) {
  const PhiloxBlock b = rng.block(g / 4);
  const normal_math::Normals4 n = normal_math::normals_of_block(b[0], b[1], b[2], b[3], scale);
  for (size_t k = 0; k < count; ++k) out[k] = n.z[g % 4 + k];
}

}  // namespace

void fill_normal_isa(Isa isa, const RngStream& rng, std::span<float> out, float scale,
                     uint64_t first_index) {
  isa_kernels::NormalBlocks* kernel = normal_kernel(isa);
  size_t k = 0;
  const size_t n = out.size();
  // Head: up to the next block boundary.
  if (first_index % 4 != 0 && n > 0) {
    const size_t head = std::min<size_t>(n, 4 - first_index % 4);
    partial_block(rng, first_index, head, scale, out.data());
    k = head;
  }
  // Whole blocks, batched.
  const size_t blocks = (n - k) / 4;
  if (blocks > 0) {
    const std::array<uint32_t, 2> key = rng.key();
    kernel(key[0], key[1], rng.worker_word(), rng.step_word(), (first_index + k) / 4, blocks, scale,
           out.data() + k);
    k += 4 * blocks;
  }
  // Tail.
  if (k < n) partial_block(rng, first_index + k, n - k, scale, out.data() + k);
}

void fill_normal(const RngStream& rng, std::span<float> out, float scale, uint64_t first_index) {
  fill_normal_isa(active_isa(), rng, out, scale, first_index);
}

}  // namespace bitlab
