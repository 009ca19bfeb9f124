// How an optimizer that reads only the workers' mean gradient (sgd,
// momentum_sgd, adam, lamb) gets it: the option `gradient_exchange`.
//   {"name": "allreduce"}   the exact mean in the `wire` type (the default)
//   {"name": "powersgd", ...} PyTorch DDP's PowerSGD communication hook, with
//                           the field names and defaults of torch 1.13's
//                           PowerSGDState (sim/collectives/powersgd.hpp,
//                           docs/algorithms.md §10)
// DDP's fp16_compress_hook and bf16_compress_hook are the allreduce with
// wire fp16 and bf16 (docs/experiments.md).
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "optimizers/optimizer.hpp"
#include "sim/collectives/powersgd.hpp"
#include "sim/core/float16.hpp"
#include "sim/core/schema.hpp"

namespace bitlab {

struct GradientExchangeOptions {
  std::string name = "allreduce";
  PowerSgdOptions powersgd;  // read only when name = "powersgd"
  static Schema<PowerSgdOptions> powersgd_schema();
};

template <>
struct JsonCodec<GradientExchangeOptions> {
  static const char* type_name() { return "object"; }
  static GradientExchangeOptions read(const Json& j, std::string_view path);
  static Json write(const GradientExchangeOptions& v);
};

inline constexpr const char* kGradientExchangeDoc =
    "how the workers' gradients become their mean: {\"name\": \"allreduce\"} (the exact mean in "
    "the wire type; DDP's default, and with wire fp16/bf16 its fp16/bf16 compress hooks) or "
    "{\"name\": \"powersgd\", ...} (DDP's PowerSGD hook, torch 1.13's PowerSGDState fields: "
    "matrix_approximation_rank 1, start_powerSGD_iter 1000, min_compression_rate 2, "
    "use_error_feedback true, warm_start true, orthogonalization_epsilon 0, random_seed 0, "
    "batch_tensors_with_same_shape false, and DDP's bucket_cap_mb 25; docs/algorithms.md §10)";

// Adds `gradient_exchange` (GradientExchangeOptions Options::gradient_exchange)
// and the cross-field rule that PowerSGD exchanges fp32 (the `wire` field).
template <class Options>
void add_gradient_exchange_field(Schema<Options>& s) {
  s.field("gradient_exchange", &Options::gradient_exchange, kGradientExchangeDoc);
  s.check([](const Options& o, const std::string& path) {
    if (o.gradient_exchange.name == "powersgd" && o.wire != "fp32") {
      config_fail(join_path(path, "wire"), Json(o.wire),
                  "must be fp32 with gradient_exchange powersgd (the hook compresses the fp32 "
                  "bucket; DDP's fp16 hook cannot be stacked on it here)");
    }
  });
}

// For an optimizer whose exchange is its own compressed collective: a
// `gradient_exchange` key is refused, naming what it does instead.
template <class Options>
void refuse_gradient_exchange(Schema<Options>& s, const std::string& own_exchange) {
  s.refuse_key("gradient_exchange",
               "this optimizer compresses its own exchange (" + own_exchange +
                   "); gradient_exchange is an option of sgd, momentum_sgd, adam and lamb, whose "
                   "gradients are exchanged uncompressed");
}

// The exchange one optimizer owns: the mean of this step's gradients.
class GradientExchange {
 public:
  GradientExchange(const GradientExchangeOptions& opts, WireDtype wire);
  // The wire the cluster may stream the mean in (allreduce), or nullopt:
  // PowerSGD reads every worker's gradient.
  std::optional<WireDtype> streamed_wire() const;
  void setup(Cluster& cluster);
  // ḡ: `g_mean` filled (or the cluster's streamed mean), the step's records logged.
  std::span<const float> mean(StepContext& ctx, std::span<float> g_mean);
  // One phase for the allreduce; "full" then "powersgd" for PowerSGD.
  CommPlan plan(const PlanShape& shape) const;
  // The bytes setup() allocates beyond the optimizer's own buffers.
  uint64_t planned_bytes(const Optimizer::StateShape& s) const;
  size_t held_worker_bytes() const { return powersgd_ ? powersgd_->held_worker_bytes() : 0; }
  // "full" (the allreduce, PowerSGD's plain steps) or "powersgd", of the last step.
  const char* phase() const;
  void serialize(StateArchive& io) {
    if (powersgd_) powersgd_->serialize(io);
  }
  PowerSgdExchange* powersgd() { return powersgd_.get(); }

 private:
  GradientExchangeOptions opts_;
  WireDtype wire_;
  std::unique_ptr<PowerSgdExchange> powersgd_;
  int64_t last_step_ = 0;
};

// An optimizer that reads the workers' gradients only through their mean
// (sgd, momentum_sgd, adam, lamb): it owns a GradientExchange, which answers
// what the cluster and the bridge ask about the exchange.
class MeanGradientOptimizer : public Optimizer {
 public:
  MeanGradientOptimizer(const GradientExchangeOptions& opts, WireDtype wire)
      : exchange_(opts, wire) {}
  std::optional<WireDtype> gradient_mean_wire() const override {
    return exchange_.streamed_wire();
  }
  const char* phase() const override { return exchange_.phase(); }
  size_t held_worker_state_bytes() const override { return exchange_.held_worker_bytes(); }
  PowerSgdExchange* powersgd_exchange() override { return exchange_.powersgd(); }

 protected:
  GradientExchange exchange_;
};

}  // namespace bitlab
