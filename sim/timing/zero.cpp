#include "sim/timing/zero.hpp"

#include <string>

namespace bitlab {

Schema<ZeroOptions> ZeroOptions::schema() {
  using O = ZeroOptions;
  Schema<O> s;
  s.field("stage", &O::stage,
          "ZeRO stage: 0 replicated, 1 optimizer state partitioned, 2 + gradients, 3 + "
          "parameters (DeepSpeed's zero_optimization.stage)",
          {rules::at_least<int64_t>(0), rules::at_most<int64_t>(3)});
  s.field("reduce_bucket_size", &O::reduce_bucket_size,
          "elements per gradient reduce-scatter bucket; each bucket is one collective "
          "(DeepSpeed's default 5e8)",
          {rules::at_least<int64_t>(1)});
  s.field("allgather_bucket_size", &O::allgather_bucket_size,
          "elements per parameter all-gather bucket at stage 1/2 (DeepSpeed's default 5e8)",
          {rules::at_least<int64_t>(1)});
  s.field("overlap_comm", &O::overlap_comm,
          "overlap the gradient reduction (and stage 3's parameter gathers) with compute, by "
          "compute.overlap of the pass that hides it; absent: true at stage 3, else false "
          "(DeepSpeed's overlap_comm_valid)");
  s.field("zero_quantized_weights", &O::zero_quantized_weights,
          "ZeRO++ qwZ: stage 3's parameter all-gathers in int8 with an fp32 scale per block of "
          "at most 8000 elements");
  s.field("zero_hpz_partition_size", &O::zero_hpz_partition_size,
          "ZeRO++ hpZ: a secondary copy of the parameters partitioned over this many GPUs of a "
          "node, so the backward all-gather stays inside the node (1: off); must divide the "
          "GPUs per node",
          {rules::at_least<int64_t>(1)});
  s.field("zero_quantized_gradients", &O::zero_quantized_gradients,
          "ZeRO++ qgZ: the gradient reduce-scatter as LoCo's quantized two-stage all-to-all "
          "(optimizer loco, exchange two_stage, at stage 3)");
  s.check([](const O& o, const std::string& path) {
    if (o.stage < 3 && o.zero_quantized_weights) {
      config_fail(join_path(path, "zero_quantized_weights"), Json(true),
                  "qwZ quantizes stage 3's parameter all-gathers: needs stage 3 (stage = " +
                      std::to_string(o.stage) + ")");
    }
    if (o.stage < 3 && o.zero_hpz_partition_size > 1) {
      config_fail(join_path(path, "zero_hpz_partition_size"), Json(o.zero_hpz_partition_size),
                  "hpZ partitions stage 3's parameters: needs stage 3 (stage = " +
                      std::to_string(o.stage) + ")");
    }
  });
  return s;
}

ZeroOptions read_zero_options(const Json& raw, const std::string& path) {
  if (!raw.is_object()) config_fail(path, raw, "must be a JSON object");
  Json filled = raw;
  if (!filled.contains("overlap_comm") || filled["overlap_comm"].is_null()) {
    // DeepSpeedZeroConfig.overlap_comm_valid: None means stage == 3.
    const Json stage = filled.value("stage", Json(0));
    filled["overlap_comm"] = stage.is_number() && stage.get<double>() == 3;
  }
  return ZeroOptions::schema().read(filled, path);
}

int64_t quantized_weight_bytes(int64_t elements) {
  const int64_t blocks = (elements + kQuantizedWeightBlock - 1) / kQuantizedWeightBlock;
  return elements + 4 * blocks;
}

}  // namespace bitlab
