#include "optimizers/gradient_exchange.hpp"

#include <limits>

#include "optimizers/common.hpp"

namespace bitlab {

Schema<PowerSgdOptions> GradientExchangeOptions::powersgd_schema() {
  using O = PowerSgdOptions;
  Schema<O> s;
  s.allow_key("name");
  s.field("matrix_approximation_rank", &O::matrix_approximation_rank,
          "the rank r of the approximation P·Qᵀ of each compressed tensor (min with its rows "
          "and columns)",
          {rules::at_least<int64_t>(1)});
  s.field("start_powerSGD_iter", &O::start_powerSGD_iter,
          "steps of the plain allreduce before PowerSGD starts (the hook's state.iter counts "
          "from 0: steps 1..start are plain)",
          {rules::at_least<int64_t>(0)});
  s.field("min_compression_rate", &O::min_compression_rate,
          "a tensor is compressed only when (rows + cols)·r·rate < rows·cols",
          {rules::at_least(0.0)});
  s.field("use_error_feedback", &O::use_error_feedback,
          "add each worker's last compression error (its input minus the exchanged result, "
          "over the whole bucket) to its next gradient");
  s.field("warm_start", &O::warm_start, "start each step's power iteration from the last Q");
  s.field("orthogonalization_epsilon", &O::orthogonalization_epsilon,
          "added to each column's norm in Gram-Schmidt (rank <= 2; torch's QR for rank > 2 "
          "takes none)",
          {rules::at_least(0.0)});
  s.field("random_seed", &O::random_seed,
          "seed of Q's random starts (numpy's RandomState(seed) in the hook: 0 to 2^32 - 1)",
          {rules::in_closed<int64_t>(0, 4294967295LL)});
  s.field("batch_tensors_with_same_shape", &O::batch_tensors_with_same_shape,
          "compress the tensors of one shape as one batch (the same result; only the order of "
          "Q's random draws changes)");
  s.field("bucket_cap_mb", &O::bucket_cap_mb,
          "DDP's bucket size in MiB: the buckets decide the grouping, the error memory and the "
          "number of allreduces",
          {rules::greater(0.0)});
  s.check([](const O& o, const std::string& path) {
    // PowerSGDState.__init__'s own refusal.
    if ((o.use_error_feedback || o.warm_start) && o.start_powerSGD_iter <= 1) {
      config_fail(join_path(path, "start_powerSGD_iter"), Json(o.start_powerSGD_iter),
                  "must be > 1 when use_error_feedback or warm_start is on (torch's "
                  "PowerSGDState refuses it: DDP rebuilds its buckets after the first step)");
    }
  });
  return s;
}

GradientExchangeOptions JsonCodec<GradientExchangeOptions>::read(const Json& j,
                                                                 std::string_view path) {
  if (!j.is_object()) config_fail(path, j, "must be a JSON object with a \"name\"");
  const std::string p(path);
  GradientExchangeOptions out;
  if (!j.contains("name")) {
    config_fail(join_path(p, "name"), Json(nullptr),
                "missing: must be \"allreduce\" or \"powersgd\"");
  }
  out.name = JsonCodec<std::string>::read(j.at("name"), join_path(p, "name"));
  if (out.name == "powersgd") {
    out.powersgd = GradientExchangeOptions::powersgd_schema().read(j, p);
    return out;
  }
  if (out.name != "allreduce") {
    config_fail(join_path(p, "name"), j.at("name"),
                one_of_message(out.name, {"allreduce", "powersgd"}));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "name") {
      config_fail(join_path(p, it.key()), it.value(),
                  "unknown key: the allreduce exchange takes no options (its precision is the "
                  "optimizer's `wire`)");
    }
  }
  return out;
}

Json JsonCodec<GradientExchangeOptions>::write(const GradientExchangeOptions& v) {
  if (v.name != "powersgd") return Json{{"name", v.name}};
  Json out = {{"name", v.name}};
  const Json fields = GradientExchangeOptions::powersgd_schema().write(v.powersgd);
  for (auto it = fields.begin(); it != fields.end(); ++it) out[it.key()] = it.value();
  return out;
}

GradientExchange::GradientExchange(const GradientExchangeOptions& opts, WireDtype wire)
    : opts_(opts), wire_(wire) {}

std::optional<WireDtype> GradientExchange::streamed_wire() const {
  if (opts_.name == "powersgd") return std::nullopt;
  return wire_;
}

void GradientExchange::setup(Cluster& cluster) {
  if (opts_.name != "powersgd") return;
  powersgd_ = std::make_unique<PowerSgdExchange>(opts_.powersgd, cluster.workers(), cluster.dim(),
                                                 cluster.tensors());
  powersgd_->setup(cluster.local_workers().begin, cluster.local_workers().size());
}

std::span<const float> GradientExchange::mean(StepContext& ctx, std::span<float> g_mean) {
  last_step_ = ctx.step;
  if (!powersgd_) return allreduce_gradients(ctx, g_mean, wire_);
  powersgd_->exchange(ctx.comm, ctx.cluster.grads(), ctx.step, g_mean);
  return g_mean;
}

const char* GradientExchange::phase() const {
  if (!powersgd_ || last_step_ - 1 < opts_.powersgd.start_powerSGD_iter) return "full";
  return "powersgd";
}

CommPlan GradientExchange::plan(const PlanShape& shape) const {
  if (opts_.name != "powersgd") return full_allreduce_plan(shape, wire_);
  const PowerSgdExchange x(opts_.powersgd, shape.workers, static_cast<size_t>(shape.params),
                           shape.tensors);
  const int64_t start = std::min(opts_.powersgd.start_powerSGD_iter, shape.steps);
  CommPlan plan;
  // Step 1 allreduces one bucket (DDP's first iteration); the later plain
  // steps allreduce the rebuilt buckets. The plan's phases are priced per
  // step, so step 1's single bucket is counted as a rebuilt step: the same
  // bytes, fewer messages (a note says so).
  plan.phases.push_back({"full", start, x.vanilla_records(false)});
  plan.phases.push_back({"powersgd", shape.steps - start, x.compressed_records()});
  plan.notes.push_back(
      "powersgd: step 1 sends every gradient in one bucket (DDP's first iteration); the plan "
      "prices it as a later plain step (same bytes, one message round per bucket)");
  return plan;
}

uint64_t GradientExchange::planned_bytes(const Optimizer::StateShape& s) const {
  if (opts_.name != "powersgd") return 0;
  static const std::vector<TensorInfo> kNone;
  return PowerSgdExchange::planned_bytes(opts_.powersgd, s.resident, s.dim,
                                         s.tensors ? *s.tensors : kNone, s.workers);
}

}  // namespace bitlab
