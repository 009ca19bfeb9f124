#include "sim/lab/zero_plan.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace bitlab {

namespace {

bool plain_dtype(std::string_view dt) {
  return dt == "fp32" || dt == "fp16" || dt == "bf16";
}

int64_t dtype_bytes(std::string_view dt) {
  return dt == "fp32" ? 4 : 2;
}

// DeepSpeed's fp32 states beyond the master copy (4 bytes), per optimizer,
// from the reference implementations' state dicts: Adam exp_avg and
// exp_avg_sq; 1-bit Adam / 0/1 Adam (deepspeed/runtime/fp16/onebit/adam.py,
// zoadam.py) the same plus worker_error (whole) and server_error (1/N);
// 1-bit LAMB (lamb.py) adds exp_avg_sq_fresh; LoCo (coalesced_collectives.py
// all_to_all_loco_quant_reduce) keeps an intra-node error of the whole
// gradient and an inter-node one of 1/(GPUs per node), stored 8-bit.
ZeroModel model_of(const std::string& name, const Json& opt) {
  ZeroModel m;
  m.optimizer = name;
  const auto onebit = [&](double partitioned, double replicated) {
    m.partitioned_state = 4 + partitioned;
    m.replicated_state = replicated;
    m.worker_error = 4;
    m.server_error = 4;
    m.max_stage = 2;
    m.full_gradient = true;
    m.in_deepspeed = false;
    m.why_max_stage =
        "its compressed exchange sends every GPU's momentum of the whole model, which stage 3's "
        "layer-by-layer gradients never hold at once";
  };
  if (name == "sgd") {
    m.partitioned_state = 4;
  } else if (name == "momentum_sgd") {
    m.partitioned_state = 4 + 4;
  } else if (name == "adam" || name == "lamb") {
    m.partitioned_state = 4 + 8;
  } else if (name == "onebit_adam" || name == "zero_one_adam" || name == "apmsqueeze") {
    onebit(4, 4);  // variance sharded, momentum whole (the exchange compresses it)
  } else if (name == "onebit_lamb") {
    onebit(8, 4);  // variance and its fresh copy sharded, momentum whole
  } else if (name == "binsgdm") {
    onebit(0, 4);  // sign momentum: the momentum whole, no error buffers
    m.worker_error = m.server_error = 0;
  } else if (name == "loco") {
    const bool adam = opt.value("base", std::string("adam")) == "adam";
    m.partitioned_state = 4 + (adam ? 8 : 4);
    const double bytes = static_cast<double>(opt.value("error_storage_bits", int64_t{8})) / 8.0;
    m.worker_error = bytes;
    m.node_error = opt.value("exchange", std::string("two_stage")) == "two_stage" ? bytes : 0;
    // DeepSpeed runs LoCo only at stage 3 (qgZ with zeropp_loco_param).
    m.in_deepspeed = false;
  } else {
    m.max_stage = 0;
    m.why_max_stage = "bitlab has no ZeRO model of its state (sim/lab/zero_plan.cpp)";
  }
  return m;
}

void push(ZeroPhase& out, const CommRecord& r, ZeroRole role, int64_t times = 1) {
  for (int64_t i = 0; i < times; ++i) {
    out.plan.records.push_back(r);
    out.roles.push_back(role);
  }
}

// `elements` of `dtype` as buckets of at most `bucket` elements, each one
// ring collective `op` over all n ranks.
void bucketed(ZeroPhase& out, const char* op, const char* dtype, int64_t elements, int64_t bucket,
              int n, ZeroRole role, int64_t times, const char* field) {
  const int64_t full = elements / bucket, rest = elements % bucket;
  if ((full + (rest > 0 ? 1 : 0)) * times > kMaxZeroCollectives) {
    config_fail(std::string("zero.") + field, Json(bucket),
                "makes " + std::to_string((full + (rest > 0)) * times) +
                    " collectives a step; bitlab cost prices at most " +
                    std::to_string(kMaxZeroCollectives) + ": give a larger bucket");
  }
  const int64_t b = dtype_bytes(dtype);
  const auto record = [&](int64_t count) {
    const int64_t s = count * b;
    return make_comm_record(op, "ring", dtype, "all", n, 1, s, ring_allgather_cost(n, s));
  };
  for (int64_t t = 0; t < times; ++t) {
    if (full > 0) push(out, record(bucket), role, full);
    if (rest > 0) push(out, record(rest), role);
  }
}

// Stage 3's gather of one tensor: fp16, or qwZ's int8 codes and fp32 scales
// (two all-gathers, as partition_parameters.py sends them), over `p` ranks.
void gather_tensor(ZeroPhase& out, int64_t elements, bool quantized, const char* scope, int p,
                   int groups, ZeroRole role) {
  const auto add = [&](const char* dtype, int64_t s) {
    push(out, make_comm_record("allgather", "ring", dtype, scope, p, groups, s,
                               ring_allgather_cost(p, s)),
         role);
  };
  if (!quantized) {
    add("fp16", 2 * elements);
    return;
  }
  add("int8", elements);
  add("fp32", quantized_weight_bytes(elements) - elements);
}

void stage3_gathers(ZeroPhase& out, const ZeroOptions& z, const ZeroShape& s,
                    const std::vector<TensorInfo>& tensors) {
  const int n = s.workers, h = static_cast<int>(z.zero_hpz_partition_size);
  for (const auto& t : tensors) {
    gather_tensor(out, static_cast<int64_t>(t.size), z.zero_quantized_weights, "all", n, 1,
                  ZeroRole::kForwardGather);
  }
  for (const auto& t : tensors) {
    if (h > 1 && h < n) {
      // hpZ: from the secondary copy, inside groups of h GPUs of one node.
      gather_tensor(out, static_cast<int64_t>(t.size), z.zero_quantized_weights, "intra", h,
                    n / h, ZeroRole::kBackwardGather);
    } else {
      gather_tensor(out, static_cast<int64_t>(t.size), z.zero_quantized_weights, "all", n, 1,
                    ZeroRole::kBackwardGather);
    }
  }
}

}  // namespace

ZeroModel zero_model(const Json& optimizer, int64_t stage) {
  const std::string name = optimizer.at("name").get<std::string>();
  ZeroModel m = model_of(name, optimizer);
  if (stage > m.max_stage) {
    config_fail("zero.stage", Json(stage),
                "optimizer " + name + " has no partitioned form at stage " +
                    std::to_string(stage) + " (" + m.why_max_stage + "); use stage " +
                    std::to_string(m.max_stage) + (m.max_stage > 0 ? " or below" : ""));
  }
  if (name == "loco" && stage == 3 && optimizer.value("exchange", std::string()) != "two_stage") {
    config_fail("optimizer.exchange", optimizer.at("exchange"),
                "LoCo under ZeRO-3 is DeepSpeed's qgZ exchange: needs \"two_stage\"");
  }
  return m;
}

ZeroMemory zero_memory(const ZeroModel& m, const ZeroOptions& z, const ZeroShape& s) {
  const double p = static_cast<double>(s.params), n = s.workers;
  const int64_t stage = z.stage;
  // Per part: bytes every GPU holds whole, and bytes before the division by N.
  double whole = 0, shared = 0;
  ZeroMemory mem;
  const auto part = [&](double& slot, double whole_bytes, double shared_bytes) {
    slot += whole_bytes + shared_bytes / n;
    whole += whole_bytes;
    shared += shared_bytes;
  };
  // fp16 parameters: whole below stage 3; stage 3 shards them, and hpZ keeps
  // a secondary copy of 1/h (int8 with qwZ, as partition_parameters.py).
  if (stage < 3) {
    part(mem.params_bytes, 2 * p, 0);
  } else {
    part(mem.params_bytes, 0, 2 * p);
    const double h = static_cast<double>(z.zero_hpz_partition_size);
    if (z.zero_hpz_partition_size > 1) {
      part(mem.params_bytes,
           (z.zero_quantized_weights
                ? static_cast<double>(quantized_weight_bytes(s.params))
                : 2 * p) / h,
           0);
    }
  }
  // Gradients: fp16 (2) whole below stage 2 (or when the exchange reads the
  // whole local gradient), fp32 (4) sharded from stage 1. Stage 3 keeps no
  // fp16 gradient of the model: DeepSpeed's estimate_zero3 counts 18P/N, the
  // fp16 gradients of the layer at work being in the working buffer.
  if (stage == 0) {
    part(mem.gradients_bytes, 6 * p, 0);
  } else if (stage == 1 || (stage == 2 && m.full_gradient)) {
    part(mem.gradients_bytes, 2 * p, 4 * p);
  } else if (stage == 2) {
    part(mem.gradients_bytes, 0, 6 * p);
  } else {
    part(mem.gradients_bytes, 0, 4 * p);
  }
  if (stage == 0) {
    part(mem.optimizer_state_bytes, (m.partitioned_state + m.replicated_state) * p, 0);
  } else {
    part(mem.optimizer_state_bytes, m.replicated_state * p, m.partitioned_state * p);
  }
  const double g = std::max(1, s.gpus_per_node);
  part(mem.error_buffer_bytes, m.worker_error * p + m.node_error * p / g, m.server_error * p);
  if (stage == 3) part(mem.working_bytes, 4.0 * static_cast<double>(s.largest_layer_params), 0);
  // DeepSpeed's estimators: 2P + int(18P/N) (stage 2), 4L + int(18P/N) (stage 3).
  mem.total_bytes = static_cast<int64_t>(whole) + static_cast<int64_t>(shared / n);
  return mem;
}

ZeroPhase zero_phase(const PhasePlan& phase, const ZeroModel& m, const ZeroOptions& z,
                     const ZeroShape& s, const std::vector<TensorInfo>& tensors,
                     int64_t micro_steps) {
  ZeroPhase out;
  out.plan.name = phase.name;
  out.plan.steps = phase.steps;
  if (z.stage == 0) {
    out.plan = phase;
    out.roles.assign(phase.records.size(), ZeroRole::kExchange);
    return out;
  }
  const int n = s.workers;
  const int64_t g = std::max(1, s.gpus_per_node);
  if (z.zero_hpz_partition_size > 1 && g % z.zero_hpz_partition_size != 0) {
    config_fail("zero.zero_hpz_partition_size", Json(z.zero_hpz_partition_size),
                "must divide the GPUs per node (" + std::to_string(g) + ")");
  }
  // Gradients partitioned (stage 2, 3) are reduced every micro-step.
  const int64_t reduce_times = z.stage >= 2 && !m.full_gradient ? micro_steps : 1;
  if (z.stage == 3) {
    for (int64_t t = 0; t < micro_steps; ++t) stage3_gathers(out, z, s, tensors);
  }
  bool compressed = false;
  for (const auto& r : phase.records) compressed = compressed || !plain_dtype(r.dtype);
  for (const auto& r : phase.records) {
    const std::string_view op(r.op);
    if (op == "allreduce" && plain_dtype(r.dtype)) {
      bucketed(out, "reduce_scatter", r.dtype, r.payload_bytes / dtype_bytes(r.dtype),
               z.reduce_bucket_size, n, ZeroRole::kGradientReduce, reduce_times,
               "reduce_bucket_size");
    } else if (compressed && op == "allgather" && plain_dtype(r.dtype) &&
               r.payload_bytes >= s.params) {
      // The whole mean gathered at the end of an exchange (LoCo's): each
      // GPU updates only its partition, which it already holds.
      continue;
    } else {
      // A compressed exchange: at stage 3 it is the gradient reduction of
      // every micro-step (qgZ); below, once, exposed.
      push(out, r, z.stage == 3 ? ZeroRole::kGradientReduce : ZeroRole::kExchange,
           z.stage == 3 ? micro_steps : 1);
    }
  }
  if (z.stage <= 2) {
    bucketed(out, "allgather", "fp16", s.params, z.allgather_bucket_size, n, ZeroRole::kAfterStep,
             1, "allgather_bucket_size");
  }
  return out;
}

StepTime price_zero_step(const ZeroPhase& phase, const ZeroOptions& z, const Topology& t,
                         const std::vector<double>& worker_compute_s, const ComputeOptions& c) {
  if (z.stage == 0) return price_step(phase.plan.records, t, worker_compute_s, c);
  StepTime st;
  for (double w : worker_compute_s) st.compute_s = std::max(st.compute_s, w);
  double exposed = 0, forward = 0, backward = 0;
  for (size_t i = 0; i < phase.plan.records.size(); ++i) {
    const CommRecord& r = phase.plan.records[i];
    const double time = collective_time_s(r, t);
    const ZeroRole role = phase.roles[i];
    if (role == ZeroRole::kForwardGather) {
      forward += time;
    } else if (role == ZeroRole::kBackwardGather || role == ZeroRole::kGradientReduce) {
      backward += time;
    } else {
      exposed += time;
    }
    if (c.memory_bandwidth_gbytes_per_s > 0) {
      st.compression_s += compression_bytes_touched(r) / (c.memory_bandwidth_gbytes_per_s * 1e9);
    }
  }
  // overlap_comm: the forward's gathers behind the forward (1/3 of compute),
  // the backward's gathers and reductions behind the backward (2/3), each by
  // compute.overlap; stage 1 reduces only in the last micro-step's backward.
  double hidden_forward = 0, hidden_backward = 0;
  if (z.overlap_comm) {
    const double micro = static_cast<double>(c.gradient_accumulation_steps);
    const double backward_s = (2.0 / 3.0) * st.compute_s / (z.stage == 1 ? micro : 1.0);
    hidden_forward = std::min(forward, c.overlap * (1.0 / 3.0) * st.compute_s);
    hidden_backward = std::min(backward, c.overlap * backward_s);
  }
  st.comm_s = exposed + (forward - hidden_forward) + (backward - hidden_backward) +
              st.compression_s;
  st.step_s = st.compute_s + st.comm_s;
  return st;
}

}  // namespace bitlab
