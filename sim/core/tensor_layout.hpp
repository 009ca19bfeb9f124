// The layout of the flat parameter vector: which slices form one tensor (a
// layer's weight or bias). Problems describe it (Problem::tensors()); the
// optimizers read it through the Cluster (Cluster::tensors()) for per-tensor
// rules such as LAMB's trust ratios — neither layer includes the other.
#pragma once

#include <cstddef>
#include <string>

namespace bitlab {

// A contiguous slice of the flat parameter vector that forms one tensor
// (a layer's weight or bias). LAMB's trust ratios are per tensor.
struct TensorInfo {
  std::string name;
  size_t offset = 0;
  size_t size = 0;
};

}  // namespace bitlab
