// The layout of the flat parameter vector: which slices form one tensor (a
// layer's weight or bias). Problems describe it (Problem::tensors()); the
// optimizers read it through the Cluster (Cluster::tensors()) for per-tensor
// rules such as LAMB's trust ratios — neither layer includes the other.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace bitlab {

// A contiguous slice of the flat parameter vector that forms one tensor
// (a layer's weight or bias). LAMB's trust ratios are per tensor.
//
// `rows` and `cols` are PyTorch's shape[0] and shape[1] (a conv weight
// [out, in, k, k] has rows = out, cols = in); rows = 0 marks a 1-D tensor (a
// bias, a norm's gain). LoCo's reference exchange reads them: it sends 1-D
// tensors uncompressed and quantizes a tensor in max(rows, cols, world) groups
// (docs/algorithms.md §6).
struct TensorInfo {
  std::string name;
  size_t offset = 0;
  size_t size = 0;
  size_t rows = 0;
  size_t cols = 0;
  bool one_dimensional() const { return rows == 0; }
};

// The most square 2-D shape of n elements: rows = the largest divisor of n not
// above √n, cols = n / rows. Synthetic problems (a vector with no layers)
// describe their blocks this way, so that LoCo's per-tensor groups are about
// √n elements, as for a square weight matrix.
inline TensorInfo square_tensor(std::string name, size_t offset, size_t n) {
  size_t rows = 1;
  for (size_t r = 1; r * r <= n; ++r) {
    if (n % r == 0) rows = r;
  }
  return {std::move(name), offset, n, rows, n / rows};
}

}  // namespace bitlab
