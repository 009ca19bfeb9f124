// LoCo (Xie et al. 2024; docs/algorithms.md §6); see loco.hpp.
#include "optimizers/loco.hpp"
#include "optimizers/gradient_exchange.hpp"

#include "optimizers/adam.hpp"
#include "optimizers/common.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/compress/group_limits.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<LocoOptions> LocoOptions::schema() {
  using O = LocoOptions;
  Schema<O> s;
  s.field("base", &O::base,
          "the wrapped optimizer, run unchanged on the averaged quantized gradient: adam "
          "(Adam/AdamW, docs/algorithms.md §2) or momentum_sgd (torch.optim.SGD with momentum)",
          {rules::one_of({"adam", "momentum_sgd"})});
  s.field("lr", &O::lr, "learning rate of the base optimizer (the default suits adam)",
          {rules::greater(0.0)});
  add_adam_fields(s, {.beta1 = "base adam only",
                      .beta2 = "base adam only",
                      .eps = "base adam only",
                      .weight_decay = "with base momentum_sgd coupled instead (added to ḡ, "
                                      "torch.optim.SGD's form)",
                      .bias_correction = "base adam only; on by default, as PyTorch (LoCo "
                                         "wraps a standard optimizer)"});
  s.field("momentum", &O::momentum, "momentum_sgd: momentum factor μ (dampening 0)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("nesterov", &O::nesterov, "momentum_sgd: Nesterov momentum in PyTorch's form");
  s.field("bits", &O::bits,
          "bits b per element of the symmetric per-group quantizer Q_b (LoCo and ZeRO++: 4)",
          {rules::in_closed<int64_t>(1, 8)});
  s.field("group_size", &O::group_size,
          "flat and allgather exchanges: elements per quantization scale (fp32), also the group "
          "of the 8-bit error storage. two_stage uses the reference's max(rows, cols, world) "
          "groups per tensor instead",
          {rules::at_least<int64_t>(1), rules::at_most<int64_t>(kMaxQuantizeGroup)});
  s.field("rounding", &O::rounding, "rounding of Q_b: nearest (LoCo) or stochastic",
          {rules::one_of({"nearest", "stochastic"})});
  s.field("err_beta", &O::err_beta,
          "β of the error moving average e = β·e + (1−β)·(h − Q(h)) (LoCo: 0.8; 0 = classic "
          "error feedback)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("reset_T", &O::reset_T,
          "error reset period (LoCo: 1024; 0 = never). two_stage: the reference's counter over "
          "compressed-tensor calls, a reset every reset_T + 1 calls zeroing the tensor being "
          "processed; flat and allgather: every worker's whole error after every reset_T steps",
          {rules::at_least<int64_t>(0)});
  s.field("error_storage_bits", &O::error_storage_bits,
          "8: the error buffer is stored 8-bit quantized per group, as LoCo does; 32: exact fp32",
          {Rule<int64_t>{[](const int64_t& v) { return v == 8 || v == 32; }, "must be 8 or 32"}});
  s.field("exchange", &O::exchange,
          "two_stage (default, the reference's: per tensor, intra-node then inter-node quantized "
          "all-to-all with an error buffer at each stage, uncompressed on one node and for 1-D "
          "or indivisible tensors, then bitlab's allgather of the result); flat (one quantized "
          "all-to-all over all workers + allgather, bitlab's earlier default); allgather "
          "(allgather of b-bit images, by node when node_size > 0)",
          {rules::one_of({"two_stage", "flat", "allgather"})});
  s.field("gather", &O::gather,
          "precision of what returns to every worker: fp16 (default: ZeRO-3 allgathers fp16), "
          "fp32, or (flat only) quantized (re-quantized with b bits, no error buffer); "
          "two_stage also sends its uncompressed tensors in it",
          {rules::one_of({"quantized", "fp16", "fp32"})});
  s.field("node_size", &O::node_size,
          "workers per node; must divide the workers. two_stage: 0 = the network's GPUs per node "
          "(one node without a network model, where nothing is compressed); allgather: 0 = flat, "
          "> 0 = by node (node means re-quantized without an error buffer); flat: unused",
          {rules::at_least<int64_t>(0)});
  s.field("node_reduce", &O::node_reduce,
          "two_stage: mean (default) divides the node reduction by the node size; sum keeps the "
          "reference's scale, whose node reduction sums, so compressed tensors come out node "
          "size × the mean",
          {rules::one_of({"mean", "sum"})});
  s.field("compress_seed", &O::compress_seed,
          "extra seed of the compressors' random streams (stochastic rounding), mixed with the run "
          "seed, the step and the worker");
  refuse_gradient_exchange(s, "the 4-bit quantized exchange with error compensation");
  return s;
}

QuantizeSpec LocoOptions::spec() const {
  QuantizeSpec q;
  q.bits = static_cast<int>(bits);
  q.group_size = static_cast<size_t>(group_size);
  q.stochastic = rounding == "stochastic";
  q.fp16_scale = false;
  return q;
}

namespace {

// Options that only make sense together (checked by comm_plan and setup).
void check_exchange(const LocoOptions& o, int workers) {
  check_node_size(o.node_size, workers);
  if (o.exchange == "two_stage" && o.gather == "quantized") {
    config_fail("optimizer.gather", Json(o.gather),
                "quantized applies to exchange \"flat\" only (two_stage sends fp16 or fp32)");
  }
}

// two_stage's workers per node: the option, else the network's, else one node.
int two_stage_node_size(const LocoOptions& o, int workers, int network_gpus_per_node) {
  if (o.node_size > 0) return static_cast<int>(o.node_size);
  return network_gpus_per_node > 0 ? network_gpus_per_node : workers;
}

LocoExchangeOptions exchange_options(const LocoOptions& o) {
  LocoExchangeOptions x;
  x.bits = static_cast<int>(o.bits);
  x.stochastic = o.rounding == "stochastic";
  x.err_beta = static_cast<float>(o.err_beta);
  x.reset_T = o.reset_T;
  x.storage_bits = static_cast<int>(o.error_storage_bits);
  x.wire = o.gather == "fp32" ? WireDtype::kFp32 : WireDtype::kFp16;
  x.node_sum = o.node_reduce == "sum";
  return x;
}

}  // namespace

Loco::Loco(const LocoOptions& opts) : opts_(opts), spec_(opts.spec()), adam_(opts.base == "adam") {}

CommPlan Loco::comm_plan(const PlanShape& shape) const {
  check_exchange(opts_, shape.workers);
  const size_t d = static_cast<size_t>(shape.params);
  std::vector<CommRecord> records;
  if (opts_.exchange == "two_stage") {
    const int g = two_stage_node_size(opts_, shape.workers, shape.gpus_per_node);
    records = LocoTwoStageExchange::plan(LocoTwoStageExchange::tensors_or_square(shape.tensors, d),
                                         shape.workers, g, static_cast<int>(opts_.bits),
                                         exchange_options(opts_).wire);
  } else if (opts_.exchange == "flat") {
    records = QuantizedReduceScatter::plan(shape.workers, d, spec_, opts_.gather);
  } else {
    records = CompressedAllgatherMean::plan(shape.workers, static_cast<int>(opts_.node_size), d,
                                            NbitCompressor(spec_));
  }
  CommPlan plan;
  plan.phases.push_back({"compressed", shape.steps, std::move(records)});
  return plan;
}

std::vector<std::string> Loco::warnings(int64_t steps) const {
  std::vector<std::string> out = Optimizer::warnings(steps);
  if (two_ && opts_.node_size > 0 && network_gpus_per_node_ > 0 &&
      opts_.node_size != network_gpus_per_node_) {
    out.push_back("loco: optimizer.node_size = " + std::to_string(opts_.node_size) +
                  " differs from the network's " + std::to_string(network_gpus_per_node_) +
                  " GPUs per node: the exchange runs on nodes of " +
                  std::to_string(opts_.node_size) +
                  ", but the time model prices its intra- and inter-node stages on the "
                  "network's links as if they matched");
  }
  if (two_ && !two_->compresses()) {
    out.push_back(
        two_->nodes() > 1
            ? "loco: no tensor is compressed (1-D, or size not divisible by 2 × workers): "
              "every gradient goes by a full-precision reduce-scatter, as the "
              "reference's"
            : "loco: the workers form one node (optimizer.node_size, or the network's "
              "GPUs per node; no network model means one node), where the reference "
              "compresses nothing: every gradient goes by a full-precision "
              "reduce-scatter. Set optimizer.node_size or a network preset for "
              "several nodes, or exchange \"flat\" to quantize anyway");
  }
  return out;
}

// What setup() allocates: ḡ, m (Adam: and v), d floats each; then the
// exchange's buffers: two_stage its codes and errors (every worker); flat and
// allgather every resident worker's compensated gradient h and error row, and
// the quantized reduce-scatter's or the compressed allgather's buffers.
uint64_t Loco::planned_state_bytes(const StateShape& s) const {
  const uint64_t d = s.dim;
  const uint64_t base = (adam_ ? 12 : 8) * d;
  if (opts_.exchange == "two_stage") {
    return base + LocoTwoStageExchange::resident_bytes_for(
                      s.workers, two_stage_node_size(opts_, s.workers, s.gpus_per_node), d,
                      s.resident);
  }
  const uint64_t rows = 8 * d * static_cast<uint64_t>(s.resident);
  if (opts_.exchange == "flat") {
    return base + rows + QuantizedReduceScatter::resident_bytes_for(s.workers, s.resident, d);
  }
  return base + rows +
         CompressedAllgatherMean::resident_bytes_for(s.workers, static_cast<int>(opts_.node_size),
                                                     s.resident, d);
}

void Loco::setup(Cluster& cluster) {
  workers_ = cluster.workers();
  dim_ = cluster.dim();
  stride_ = cluster.stride();
  check_exchange(opts_, workers_);
  // Rows for this process's workers only (all in the simulator): worker i at
  // row i − local.begin (the collectives read only local workers' inputs).
  const WorkerRange local = cluster.local_workers();
  g_mean_.assign(dim_, 0.0f);
  m_.assign(dim_, 0.0f);
  if (adam_) {
    v_.assign(dim_, 0.0f);
  } else {
    v_.clear();
  }
  ef_.reset();
  rs_.reset();
  ag_.reset();
  two_.reset();
  if (opts_.exchange == "two_stage") {
    h_.clear();
    network_gpus_per_node_ = cluster.gpus_per_node();
    two_ = std::make_unique<LocoTwoStageExchange>(
        workers_, dim_, cluster.tensors(),
        two_stage_node_size(opts_, workers_, cluster.gpus_per_node()), exchange_options(opts_),
        local);
    return;
  }
  h_.assign(static_cast<size_t>(local.size()) * stride_, 0.0f);
  ErrorFeedbackOptions ef;
  ef.kind = "ema";
  ef.beta = opts_.err_beta;
  ef.reset_every = opts_.reset_T;
  ef.storage_bits = opts_.error_storage_bits;
  ef.storage_group = opts_.group_size;
  ef_ = std::make_unique<ErrorFeedback>(ef, workers_, dim_, local);  // local rows only
  if (opts_.exchange == "flat") {
    rs_ = std::make_unique<QuantizedReduceScatter>(workers_, dim_, spec_, opts_.gather, local);
  } else {
    ag_ = std::make_unique<CompressedAllgatherMean>(workers_, dim_,
                                                    std::make_shared<NbitCompressor>(spec_),
                                                    static_cast<int>(opts_.node_size), local);
  }
}

std::span<const float> Loco::quantized(int worker) {
  if (two_) return two_->stage1(worker);
  return rs_ ? rs_->quantized()[worker] : ag_->compressed()[worker];
}

void Loco::finish_step(StepContext& ctx) {
  const uint64_t seed = splitmix64(ctx.cluster.seed() ^ splitmix64(opts_.compress_seed));
  if (two_) {
    // ḡ = the reference's exchange, errors and compensation inside it.
    two_->run(ctx.comm, ctx.cluster.grads(), g_mean_, seed, ctx.step);
  } else {
    exchange_compensated(ctx, seed);
  }
  base_step(ctx);
}

void Loco::exchange_compensated(StepContext& ctx, uint64_t seed) {
  const int n = workers_;
  ef_->begin_step(ctx.step);  // periodic reset (reset_T)
  const WorkerBuffers g = ctx.cluster.grads();
  const WorkerRange mine = ctx.comm.local_workers();  // all workers in the simulator
  const WorkerBuffers h{h_.data(), stride_, dim_, n, mine.begin, mine.size()};
  // h_i = g_i + e_i
#pragma omp parallel for schedule(static) if (n > 1)
  for (int i = mine.begin; i < mine.end; ++i) ef_->compensate(i, g[i], h[i]);
  // ĥ_i = Q(h_i) inside the collective; ḡ = mean_i ĥ_i
  if (rs_) {
    rs_->run(ctx.comm, h, g_mean_, seed, ctx.step);
  } else {
    ag_->run(ctx.comm, h, g_mean_, seed, ctx.step);
  }
  // e_i = β e_i + (1−β)(h_i − ĥ_i) with the ĥ_i that were sent (then Q8 storage)
  const WorkerBuffers sent = rs_ ? rs_->quantized() : ag_->compressed();
#pragma omp parallel for schedule(static) if (n > 1)
  for (int i = mine.begin; i < mine.end; ++i) ef_->update(i, h[i], sent[i]);
}

void Loco::base_step(StepContext& ctx) {
  // The base optimizer on ḡ, unchanged.
  if (adam_) {
    const AdamCoeffs c = adam_coeffs(opts_.lr, opts_, ctx.step);
    adam_update_elements(ctx.cluster.params(), m_, v_, g_mean_, c);
    return;
  }
  // momentum_sgd: the arithmetic of MomentumSgd::step (optimizers/momentum_sgd.cpp).
  const MomentumSgdCoeffs c{static_cast<float>(opts_.lr), static_cast<float>(opts_.momentum),
                            static_cast<float>(opts_.weight_decay), opts_.nesterov};
  cpu::momentum_sgd_update(ctx.cluster.params().data(), m_.data(), g_mean_.data(), dim_, c);
}

void Loco::serialize(StateArchive& io) {
  io.field("loco.h", h_);
  io.field("loco.m", m_);
  io.field("loco.v", v_);
  if (ef_) ef_->serialize(io);
  if (rs_) rs_->serialize(io);
  if (ag_) ag_->serialize(io);
  if (two_) two_->serialize(io);
}

}  // namespace bitlab
