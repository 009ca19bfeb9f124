// ZeRO stages 0-3 and ZeRO++ in `bitlab cost` (docs/algorithms.md §11):
// what each stage sends per step, and the model states each GPU holds.
//
// Time. An optimizer's own plan (Optimizer::comm_plan) is the replicated
// job, stage 0. At stage s >= 1 each phase is rewritten:
//   * an uncompressed gradient allreduce becomes a reduce-scatter of the same
//     bytes in buckets of reduce_bucket_size elements (stage_1_and_2.py
//     average_tensor / stage3.py __reduce_and_partition_ipg_grads); at
//     stages 2 and 3 once per micro-step (gradients are partitioned, so each
//     micro-step's are reduced at once), at stage 1 once per step;
//   * a compressed exchange is kept (the 1-bit family's, with its momentum
//     whole), except a full-precision all-gather of the whole mean at its end
//     (LoCo's completion): the owner of a partition only needs its own;
//   * the parameters: stage 1/2 all-gather the updated fp16 partitions after
//     the step in buckets of allgather_bucket_size; stage 3 all-gathers each
//     tensor in the forward and again in the backward of every micro-step
//     (partition_parameters.py all_gather_coalesced), int8 codes + fp32 block
//     scales with qwZ, and the backward inside hpZ's secondary group.
// overlap_comm hides the reduce-scatters and stage 3's gathers behind compute
// by compute.overlap of the pass they run in (forward 1/3, backward 2/3 of a
// micro-step); without it nothing is hidden.
//
// Memory (bytes per GPU; P parameters, N GPUs), DeepSpeed's accounting of
// mixed-precision training (estimate_zero2_model_states_mem_needs): fp16
// parameters 2P, fp16 gradients 2P, fp32 gradients 4P, fp32 master
// parameters 4P, the optimizer's fp32 states; the 1-bit family's error
// buffers besides. ZeroModel says which parts an optimizer can partition.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/comm/comm_plan.hpp"
#include "sim/timing/network.hpp"
#include "sim/timing/zero.hpp"

namespace bitlab {

// How an optimizer's state partitions (bytes per parameter, fp32).
struct ZeroModel {
  std::string optimizer;
  double partitioned_state = 0;  // master parameters and states sharded at stage >= 1
  double replicated_state = 0;   // states its compressed exchange reads whole (kept at every stage)
  double worker_error = 0;       // error buffer of the whole vector, per GPU
  double server_error = 0;       // error buffer of the GPU's 1/N partition (already sharded)
  double node_error = 0;         // error buffer of 1/(GPUs per node) (LoCo's second stage)
  int max_stage = 3;             // the last stage with a partitioned form
  bool full_gradient = false;    // its exchange reads the whole local gradient (no stage-2 saving)
  bool in_deepspeed = true;      // DeepSpeed runs it at stage >= 1
  std::string why_max_stage;     // why no stage above max_stage
};

// The model of a resolved optimizer; throws ConfigError naming
// zero.stage when the optimizer has no form at `stage`.
ZeroModel zero_model(const Json& optimizer, int64_t stage);

struct ZeroMemory {
  double params_bytes = 0;           // fp16 parameters (stage 3: the partition + hpZ's copy)
  double gradients_bytes = 0;        // fp16 and fp32 gradients
  double optimizer_state_bytes = 0;  // fp32 master parameters and the optimizer's states
  double error_buffer_bytes = 0;     // the 1-bit family's and LoCo's error feedback
  double working_bytes = 0;          // stage 3: the largest layer's gathered fp16 parameters
                                     // and gradients (4 bytes per parameter)
  // Whole bytes + trunc(partitioned bytes / N), as DeepSpeed's int(...).
  int64_t total_bytes = 0;
};

struct ZeroShape {
  int64_t params = 0;
  int workers = 1;
  int gpus_per_node = 1;           // of the topology
  int64_t largest_layer_params = 0;  // stage 3's working buffer; 0: left out
};

ZeroMemory zero_memory(const ZeroModel& model, const ZeroOptions& zero, const ZeroShape& shape);

// Why each record of a rewritten phase is sent: how it may overlap.
enum class ZeroRole { kExchange, kGradientReduce, kForwardGather, kBackwardGather, kAfterStep };

struct ZeroPhase {
  PhasePlan plan;               // records in order (buckets and micro-steps repeated)
  std::vector<ZeroRole> roles;  // one per record
};

// Rewrites one phase of the optimizer's plan for zero.stage (stage 0: as it
// is, every record an exchange). `tensors` is the layout stage 3 gathers by;
// `micro_steps` compute.gradient_accumulation_steps. Throws ConfigError
// naming zero.<field> (a bucket count over kMaxZeroCollectives, an hpZ
// group that does not divide the node).
inline constexpr int64_t kMaxZeroCollectives = 100000;
ZeroPhase zero_phase(const PhasePlan& phase, const ZeroModel& model, const ZeroOptions& zero,
                     const ZeroShape& shape, const std::vector<TensorInfo>& tensors,
                     int64_t micro_steps);

// Prices a rewritten phase as price_step does, with the overlap above.
StepTime price_zero_step(const ZeroPhase& phase, const ZeroOptions& zero, const Topology& t,
                         const std::vector<double>& worker_compute_s, const ComputeOptions& c);

}  // namespace bitlab
