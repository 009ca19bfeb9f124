// The `zero` section (experiment files, `bitlab cost` specs, and a
// deepspeed_config's zero_optimization): DeepSpeed's ZeRO stages and ZeRO++
// options, with DeepSpeed's field names and defaults
// (deepspeed/runtime/zero/config.py, DeepSpeedZeroConfig). The time and
// memory they imply are priced by `bitlab cost` (sim/lab/zero_plan.hpp);
// `bitlab run` simulates the same update (partitioning does not change the
// arithmetic of data-parallel training), so it only validates them.
#pragma once

#include <cstdint>

#include "sim/core/schema.hpp"

namespace bitlab {

struct ZeroOptions {
  // 0: replicated (plain data parallelism); 1: optimizer state partitioned;
  // 2: + gradients; 3: + parameters (ZeroStageEnum).
  int64_t stage = 0;
  // Elements per gradient reduction bucket (stage 1/2) and per parameter
  // all-gather bucket (stage 1/2): each bucket is one collective.
  int64_t reduce_bucket_size = 500000000;
  int64_t allgather_bucket_size = 500000000;
  // Gradient reduction overlapped with backward; DeepSpeed's default is
  // "true at stage 3, else false" (overlap_comm_valid): read_zero_options
  // fills it in when the key is absent or null.
  bool overlap_comm = false;
  // ZeRO++ (Wang et al. 2023, arXiv:2306.10209; DeepSpeed's
  // partition_parameters.py): qwZ, the stage-3 parameter all-gathers in int8
  // with one fp32 scale per block (CUDAQuantizer, blocks of at most 8000);
  // hpZ, a secondary copy of the parameters partitioned over this many GPUs
  // of a node, so the backward all-gather stays inside it (1: off); qgZ,
  // the gradient reduce-scatter as a quantized two-stage all-to-all (bitlab's
  // loco with exchange two_stage: LoCo's reference lives there).
  bool zero_quantized_weights = false;
  int64_t zero_hpz_partition_size = 1;
  bool zero_quantized_gradients = false;
  static Schema<ZeroOptions> schema();
};

// Reads a `zero` object at `path` (absent or null overlap_comm: true at stage
// 3, else false, as DeepSpeed); throws ConfigError naming the field.
ZeroOptions read_zero_options(const Json& raw, const std::string& path);

// DeepSpeed's CUDAQuantizer (partition_parameters.py): blocks of at most
// target_group_size = 8000 elements, one fp32 scale each, 8-bit codes.
inline constexpr int64_t kQuantizedWeightBlock = 8000;
// Bytes of `elements` weights quantized as qwZ sends them.
int64_t quantized_weight_bytes(int64_t elements);

}  // namespace bitlab
