// The largest quantization group an options schema takes (LoCo's and the
// n-bit compressor's group_size): far past any group a paper uses (LoCo and
// ZeRO++: 128 to 2048), small enough that padding a worker's row to n groups
// (QuantizedReduceScatter) is a size the memory check prices, where 2^40 was
// an "out of memory" from the allocator.
#pragma once

#include <cstdint>

namespace bitlab {

inline constexpr int64_t kMaxQuantizeGroup = int64_t{1} << 24;

}  // namespace bitlab
