// BinSGDM (ICLR 2023 submission; docs/algorithms.md §7, [verify]); see binsgdm.hpp.
#include "optimizers/binsgdm.hpp"
#include "optimizers/gradient_exchange.hpp"

#include <algorithm>
#include <cmath>

#include "optimizers/common.hpp"
#include "sim/compress/compressors.hpp"
#include "sim/kernels/updates.hpp"

namespace bitlab {

Schema<BinSgdmOptions> BinSgdmOptions::schema() {
  using O = BinSgdmOptions;
  Schema<O> s;
  s.field("lr", &O::lr, "learning rate (ū has entries in [−1, 1], like Adam's normalised step)",
          {rules::greater(0.0)});
  s.field("beta", &O::beta,
          "decay rate β of both m and the denominator's EMA (the same β keeps |m| ≤ b)",
          {rules::in_closed_open(0.0, 1.0)});
  s.field("eps", &O::eps, "ε in z = m ⊘ (b + ε)", {rules::greater(0.0)});
  s.field("weight_decay", &O::weight_decay, "decoupled weight decay: x −= lr·(ū + wd·x)",
          {rules::at_least(0.0)});
  s.field("denominator", &O::denominator,
          "[verify] b: abs_ema = EMA of |g| (|m| ≤ b exactly) or sqrt_ema = sqrt(EMA of g²) "
          "(Adam's)",
          {rules::one_of({"abs_ema", "sqrt_ema"})});
  s.field("amsgrad", &O::amsgrad,
          "use b̂ = max over steps of b (AMSGrad's form; \"theory only\" in the paper)");
  s.field("node_size", &O::node_size,
          "0: flat allgather of every worker's bit-vector; > 1: workers per node — node mean, "
          "re-binarized, one bit-vector per node across nodes; must divide the workers",
          {rules::at_least<int64_t>(0)});
  s.field("compress_seed", &O::compress_seed,
          "extra seed of the binarization's random streams, mixed with the run seed, the step and "
          "the worker");
  refuse_gradient_exchange(s, "the 1-bit binarization of its scaled momentum");
  return s;
}

BinSgdm::BinSgdm(const BinSgdmOptions& opts)
    : opts_(opts), sqrt_ema_(opts.denominator == "sqrt_ema") {}

CommPlan BinSgdm::comm_plan(const PlanShape& shape) const {
  check_node_size(opts_.node_size, shape.workers);
  CommPlan plan;
  plan.phases.push_back(
      {"onebit", shape.steps,
       CompressedAllgatherMean::plan(shape.workers, static_cast<int>(opts_.node_size),
                                     static_cast<size_t>(shape.params), BinarizeCompressor())});
  return plan;
}

void BinSgdm::setup(Cluster& cluster) {
  workers_ = cluster.workers();
  dim_ = cluster.dim();
  stride_ = cluster.stride();
  check_node_size(opts_.node_size, workers_);
  // Rows for this process's workers only (all in the simulator): worker i at
  // row i − local_.begin.
  local_ = cluster.local_workers();
  const size_t total = static_cast<size_t>(local_.size()) * stride_;
  m_.assign(total, 0.0f);
  b_.assign(total, 0.0f);
  z_.assign(total, 0.0f);
  if (opts_.amsgrad) {
    bmax_.assign(total, 0.0f);
  } else {
    bmax_.clear();
  }
  u_.assign(dim_, 0.0f);
  ag_ = std::make_unique<CompressedAllgatherMean>(workers_, dim_,
                                                  std::make_shared<BinarizeCompressor>(),
                                                  static_cast<int>(opts_.node_size), local_);
}

void BinSgdm::finish_step(StepContext& ctx) {
  const int n = workers_;
  const BinSgdmCoeffs c{static_cast<float>(opts_.beta), static_cast<float>(1.0 - opts_.beta),
                        static_cast<float>(opts_.eps), sqrt_ema_, opts_.amsgrad};
  const WorkerBuffers g = ctx.cluster.grads();
  const WorkerRange mine = ctx.comm.local_workers();  // all workers in the simulator
  for (int i = mine.begin; i < mine.end; ++i) {
    const size_t off = static_cast<size_t>(i - mine.begin) * stride_;
    const float* gi = g[i].data();
    float* m = m_.data() + off;
    float* b = b_.data() + off;
    float* bmax = c.amsgrad ? bmax_.data() + off : nullptr;
    float* z = z_.data() + off;
    // m = β m + (1−β) g ; b = β b + (1−β)|g| (or sqrt of the EMA of g²) ;
    // amsgrad: b̂ = max(b̂, b) ; z = m ⊘ (b + ε)
    cpu::binsgdm_scale(gi, m, b, bmax, z, dim_, c);
  }
  // q_i = binarize(z_i); ū = mean_i q_i (flat or hierarchical).
  ag_->run(ctx.comm, {z_.data(), stride_, dim_, n, mine.begin, mine.size()}, u_,
           splitmix64(ctx.cluster.seed() ^ splitmix64(opts_.compress_seed)), ctx.step);
  // x = x − lr·(ū + wd·x)
  const float lr = static_cast<float>(opts_.lr);
  const float wd = static_cast<float>(opts_.weight_decay);
  cpu::sgd_update(ctx.cluster.params().data(), u_.data(), dim_, lr, wd);
}

void BinSgdm::serialize(StateArchive& io) {
  io.field("binsgdm.m", m_);
  io.field("binsgdm.b", b_);
  io.field("binsgdm.bmax", bmax_);
  io.field("binsgdm.z", z_);
  io.field("binsgdm.u", u_);
  if (ag_) ag_->serialize(io);
}

}  // namespace bitlab
